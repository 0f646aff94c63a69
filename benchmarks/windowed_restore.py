"""Restores of a windowed store: after a kill -9 only the changelog's tail; from nothing
(state dir removed) only the windows still inside retention are written.

Issue 22: "restore of a windowed store after kill -9 restores only the tail; a cold
restore restores only windows still inside retention (count them)". The input and app
of :mod:`benchmarks.windowed_retention` (tumbling minutes, hourly retention, a steady key
churn over ``hours`` of event time), all in the topic before the first worker starts.

1. A worker processes it and is killed (SIGKILL) once it has processed ``kill_at`` of
   it. A new worker on the same state directory restores (``worker_restored_records_total``
   against the changelog's records at that moment), then processes the rest and stops
   cleanly; its stores' windows are counted (those inside retention apart).
2. The state directory is removed and a worker started over it: it reads the whole
   changelog, writes only the windows inside retention
   (``worker_window_restore_skipped_records_total`` the others), and is stopped; the
   windows in its stores are counted and compared with what the stores held before.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka as ck

from benchmarks import plots
from benchmarks.apps import HOURLY_RETENTION_MS, SUMS_INPUT, WINDOWED_OUTPUT
from benchmarks.harness import (
    RunContext,
    metric_or_zero,
    new_application_id,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import create_topics, produce, raw_consumer
from benchmarks.results import PlotPath, Result, Row, table
from benchmarks.windowed_retention import HOUR_MS, churn_records
from benchmarks.windowed_retention import Params as ChurnParams
from benchmarks.windowed_runs import (
    StoredWindows,
    changelog_timestamps,
    changelog_topic,
    held_within,
    recent_start,
    stored_windows,
)
from worker.dev.processes import WorkerProcess

NAME = "windowed_restore"
TITLE = "Windowed store restores: the tail after kill -9, live windows from nothing"
APP = "benchmarks.apps:windowed_hourly_app"
PARTITIONS = 4
RESTORED = "worker_restored_records_total"
SKIPPED = "worker_window_restore_skipped_records_total"


@dataclass(frozen=True)
class Params:
    records: int
    hours: int
    active_keys: int
    kill_at: float = 0.6  # share of the input processed before the kill -9
    commit_interval_ms: int = 1000


FULL = Params(records=600_000, hours=4, active_keys=20_000)
QUICK = Params(records=20_000, hours=3, active_keys=400)


@dataclass(frozen=True)
class Restore:
    changelog: int  # records in the changelog when the worker started
    held: int  # of those, what a broker enforcing retention.ms (one hour) keeps
    restored: int  # worker_restored_records_total once ready
    skipped: int  # worker_window_restore_skipped_records_total
    seconds: float  # launch to ready


@dataclass(frozen=True)
class Measured:
    params: Params
    after_kill: Restore
    before_cold: StoredWindows  # the stores after the run, stopped cleanly
    cold: Restore
    after_cold: StoredWindows


def measure(ctx: RunContext, params: Params) -> Measured:
    broker = start_broker(ctx, "broker-windowed-restore")
    bootstrap = broker.bootstrap
    create_topics(bootstrap, {SUMS_INPUT: PARTITIONS, WINDOWED_OUTPUT: PARTITIONS})
    span = params.hours * HOUR_MS
    churn = ChurnParams(params.records, params.hours, params.active_keys, chunks=1)
    made = list(churn_records(churn, recent_start(span)))
    produce(bootstrap, SUMS_INPUT, [r for r, _ts in made], timestamps=[ts for _r, ts in made])
    app_id = new_application_id("bench-wrestore")
    settings = worker_settings(
        bootstrap,
        app_id,
        {
            "commit.interval.ms": params.commit_interval_ms,
            "num.standby.replicas": 0,
            "windowstore.changelog.additional.retention.ms": 0,
        },
    )
    state_dir = ctx.path("state")
    first = start_worker(ctx, "first", settings, APP, state_dir)
    kill_at = int(params.records * params.kill_at)
    wait_for(
        lambda: metric_or_zero(first, "worker_processed_records_total") >= kill_at
        and metric_or_zero(first, "worker_commits_total") > 0,
        max(120.0, params.records / 2000), f"{kill_at} records processed and a commit", 0.05, [first],
    )  # fmt: skip
    first.kill()
    changelog = lambda: changelog_timestamps(bootstrap, changelog_topic(app_id))  # noqa: E731
    after_kill, second = _restore(ctx, "after-kill", settings, state_dir, changelog)
    _wait_done(second, bootstrap, app_id)
    stop_worker(second)
    before = stored_windows(state_dir, HOURLY_RETENTION_MS)
    shutil.rmtree(state_dir)
    cold, third = _restore(ctx, "cold", settings, state_dir, changelog)
    stop_worker(third)
    after = stored_windows(state_dir, HOURLY_RETENTION_MS)
    broker.stop(timeout=3.0)
    return Measured(params, after_kill, before, cold, after)


def _wait_done(worker: WorkerProcess, bootstrap: str, group: str) -> None:
    """Until the application's committed input offsets reach the input's end, and the
    worker holds nothing uncommitted. Judged by the group's offsets, not by a count of
    records: the killed worker may have committed well past ``kill_at`` before its kill,
    so how much is left for this one is not known beforehand."""
    consumer = raw_consumer(bootstrap, group)
    parts = [ck.TopicPartition(SUMS_INPUT, p) for p in range(PARTITIONS)]
    ends = [consumer.get_watermark_offsets(tp, 10)[1] for tp in parts]

    def done() -> bool:
        committed = consumer.committed(parts, 10)
        return all(tp.offset >= end for tp, end in zip(committed, ends, strict=True))

    try:
        wait_for(done, 180.0, "the input committed to its end", 0.2, [worker])
    finally:
        consumer.close()
    wait_for(lambda: worker.metric("worker_uncommitted_bytes") == 0, 60, "a commit")


def _restore(
    ctx: RunContext,
    name: str,
    settings: dict[str, object],
    state_dir: Path,
    changelog: Callable[[], list[int]],
) -> tuple[Restore, WorkerProcess]:
    """Start a worker over ``state_dir``; once ready (every task restored), its counts
    (``changelog()``: the timestamps of the changelog's records)."""
    stamps = changelog()
    launched = time.monotonic()
    worker = start_worker(ctx, name, settings, APP, state_dir)
    worker.wait_ready(300)
    seconds = time.monotonic() - launched
    restored = Restore(
        len(stamps),
        held_within(stamps, HOURLY_RETENTION_MS),
        int(worker.metric(RESTORED)),
        int(worker.metric(SKIPPED)),
        seconds,
    )
    return restored, worker


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    kill, cold = measured.after_kill, measured.cold
    before, after = measured.before_cold, measured.after_cold
    written = cold.restored - cold.skipped
    result = Result(NAME, TITLE)
    result.rows += [
        Row(
            "after kill -9: records restored against the changelog",
            kill.restored, "restored (the tail)", kill.changelog, "changelog records", "records",
        ),
        Row(
            "cold restore: records written against the changelog",
            written, "written (read, less skipped as expired)", cold.changelog,
            "changelog records", "records",
        ),
        Row(
            "cold restore: windows in the stores against those inside retention before",
            after.windows, "windows after the cold restore", before.live,
            "windows inside retention, before", "windows",
        ),
    ]  # fmt: skip
    rows = [
        ["after kill -9", f"{kill.changelog:,}", f"{kill.held:,}", f"{kill.restored:,}"]
        + [f"{kill.skipped:,}"]
        + [f"{kill.restored - kill.skipped:,}", f"{kill.seconds:.1f}"],
        ["cold (state dir removed)", f"{cold.changelog:,}", f"{cold.held:,}"]
        + [f"{cold.restored:,}", f"{cold.skipped:,}", f"{written:,}", f"{cold.seconds:.1f}"],
    ]
    headers = ["restore", "changelog records", "held by retention.ms", "restored (read)"]
    headers += ["skipped as expired"]
    headers += ["written", "launch to ready (s)"]
    stores = [
        ["before (run complete, clean stop)", f"{before.windows:,}", f"{before.live:,}"],
        ["after the cold restore", f"{after.windows:,}", f"{after.live:,}"],
    ]
    result.details += [
        table(headers, rows, left=1),
        table(["the stores' windows", "on disk", "inside retention"], stores, left=1),
    ]
    result.facts = {
        "records": params.records,
        "hours": params.hours,
        "active_keys": params.active_keys,
        "kill_at": f"{params.kill_at:.0%}",
        "partitions": PARTITIONS,
        "app": APP,
        "commit_interval_ms": params.commit_interval_ms,
    }
    result.plots.append(
        plots.comparison(
            plot_path(NAME),
            "Windowed restores: records restored or written against the changelog",
            [
                ("after kill -9: restored", kill.restored, kill.changelog),
                ("cold: written", written, cold.changelog),
                ("cold: windows on disk", after.windows, before.live),
            ],
            ("restore", "changelog / before"),
        )
    )
    return result
