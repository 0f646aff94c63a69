"""A windowed store with hourly retention over hours of event time: its RocksDB size and its
changelog stay flat after the first retention period.

Issue 22: "a 30-minute-equivalent run with hourly retention (scaled down in time): RocksDB
size and changelog records held flat after the first retention period (report the curve
as a plot)". The app (:func:`benchmarks.apps.windowed_hourly_app`) counts and sums per key
per tumbling minute, emit on update, windows retained one hour. Event time runs ``hours``
hours, far faster than the wall clock (the run takes minutes), at a steady rate, with a
steady key churn: the ``active_keys`` keys in use slide along so that the whole key set
turns over every hour. The input is produced in ``chunks``; after each has been processed
and committed, the sample: the store's bytes on disk (every task), the changelog's
records and how many of them a broker enforcing the topic's ``retention.ms`` (the store's
retention: the worker runs with ``windowstore.changelog.additional.retention.ms=0``)
holds at the newest record's time (the test broker itself does not delete by time).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

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
from benchmarks.kafka_io import Record, create_topics, produce
from benchmarks.results import PlotPath, Result, Row, Target, table
from benchmarks.windowed_runs import (
    MINUTE_MS,
    changelog_timestamps,
    changelog_topic,
    disk_bytes,
    held_within,
    recent_start,
)
from worker.serde import JSON, STR
from worker.state.rocksdb_env import MiB
from worker.state.window_format import segment_interval

NAME = "windowed_retention"
TITLE = "Windowed store with hourly retention over hours of event time"
APP = "benchmarks.apps:windowed_hourly_app"
PARTITIONS = 4
HOUR_MS = 3_600_000
FLAT = 1.25  # "held flat": the end within this factor of the level after the first period


@dataclass(frozen=True)
class Params:
    records: int
    hours: int  # of event time
    active_keys: int
    chunks: int
    commit_interval_ms: int = 1000


FULL = Params(records=1_200_000, hours=5, active_keys=20_000, chunks=20)
QUICK = Params(records=24_000, hours=3, active_keys=400, chunks=6)


def churn_records(params: Params, first_ms: int, seed: int = 22) -> Iterator[tuple[Record, int]]:
    """((key, value), timestamp): evenly over ``hours`` of event time; record ``i``'s key
    drawn from ``active_keys`` keys starting at an offset that slides by ``active_keys``
    an hour (a steady churn of keys)."""
    rng = random.Random(seed)
    span = params.hours * HOUR_MS
    for i in range(params.records):
        offset = i * span // params.records
        base = offset * params.active_keys // HOUR_MS
        key = STR.serialize(f"key-{base + rng.randrange(params.active_keys):08d}")
        value = JSON.serialize({"amount": rng.randrange(1, 10_000)})
        yield (key, value), first_ms + offset  # type: ignore[misc]


@dataclass(frozen=True)
class Sample:
    event_hours: float  # event time covered so far
    records: int  # records in
    disk_bytes: int
    changelog_records: int
    changelog_held: int  # within retention.ms of the newest record
    expiry_ranges: float  # worker_window_expiry_ranges_total


@dataclass(frozen=True)
class Measured:
    params: Params
    samples: list[Sample]
    wall_seconds: float  # processing of all chunks (first produced to last committed)


def measure(ctx: RunContext, params: Params) -> Measured:
    broker = start_broker(ctx, "broker-retention")
    bootstrap = broker.bootstrap
    create_topics(bootstrap, {SUMS_INPUT: PARTITIONS, WINDOWED_OUTPUT: PARTITIONS})
    span = params.hours * HOUR_MS
    made = list(churn_records(params, recent_start(span)))
    app_id = new_application_id("bench-retention")
    settings = worker_settings(
        bootstrap,
        app_id,
        {
            "commit.interval.ms": params.commit_interval_ms,
            "num.standby.replicas": 0,
            "windowstore.changelog.additional.retention.ms": 0,
        },
    )
    worker = start_worker(ctx, "retention", settings, APP)
    worker.wait_ready(120)
    topic = changelog_topic(app_id)
    samples: list[Sample] = []
    per_chunk = params.records // params.chunks
    started = time.monotonic()
    for chunk in range(params.chunks):
        part = made[chunk * per_chunk : (chunk + 1) * per_chunk]
        produce(bootstrap, SUMS_INPUT, [r for r, _ts in part], timestamps=[ts for _r, ts in part])
        done = (chunk + 1) * per_chunk
        wait_for(
            lambda: metric_or_zero(worker, "worker_processed_records_total") >= done,  # noqa: B023
            600, f"{done} records processed", interval=0.2, alive=[worker],
        )  # fmt: skip
        wait_for(
            lambda: worker.metric("worker_uncommitted_bytes") == 0, 60, "a commit", alive=[worker]
        )
        stamps = changelog_timestamps(bootstrap, topic)
        samples.append(
            Sample(
                (part[-1][1] - made[0][1]) / HOUR_MS,
                done,
                disk_bytes(worker.state_dir),
                len(stamps),
                held_within(stamps, HOURLY_RETENTION_MS),
                worker.metric("worker_window_expiry_ranges_total"),
            )
        )
    wall = time.monotonic() - started
    stop_worker(worker)
    broker.stop(timeout=3.0)
    return Measured(params, samples, wall)


def periods(samples: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    """(the samples of the hour that starts one retention period and one expiry step in,
    those after it). From there on the store holds between one retention and one
    retention plus a step of windows; RocksDB's bytes go up and down with its compactions,
    so each period is judged by its largest sample."""
    settle = (HOURLY_RETENTION_MS + segment_interval(HOURLY_RETENTION_MS)) / HOUR_MS
    first = [s for s in samples if settle <= s.event_hours < settle + 1] or samples[-1:]
    later = [s for s in samples if s.event_hours >= settle + 1] or samples[-1:]
    return first, later


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params, samples = measured.params, measured.samples
    first, later = periods(samples)
    after = f"largest, {first[0].event_hours:.1f}-{first[-1].event_hours:.1f} h of event time"
    at_end = f"largest, {later[0].event_hours:.1f}-{later[-1].event_hours:.1f} h"
    flat = Target("<=", FLAT, "issue 22: flat, within 25% here")
    disk = [max(s.disk_bytes for s in period) / MiB for period in (later, first)]
    held = [max(s.changelog_held for s in period) for period in (later, first)]
    result = Result(NAME, TITLE)
    result.rows += [
        Row(
            "RocksDB on disk, later against the hour after the first retention period",
            disk[0], at_end, disk[1], after, "MiB on disk", flat,
        ),
        Row(
            "changelog records held, later against the hour after the first retention period",
            held[0], at_end, held[1], after, "records", flat,
        ),
    ]  # fmt: skip
    rows = [
        [
            f"{s.event_hours:.2f}",
            f"{s.records:,}",
            f"{s.disk_bytes / MiB:,.1f}",
            f"{s.changelog_records:,}",
            f"{s.changelog_held:,}",
            f"{s.expiry_ranges:,.0f}",
        ]
        for s in samples
    ]
    headers = ["event time (h)", "records in", "RocksDB MiB", "changelog records"]
    headers += ["held within retention", "expiry ranges"]
    result.details.append(table(headers, rows, left=0))
    hours = params.hours
    result.facts = {
        "records": params.records,
        "hours": hours,
        "active_keys": params.active_keys,
        "chunks": params.chunks,
        "partitions": PARTITIONS,
        "app": APP,
        "commit_interval_ms": params.commit_interval_ms,
        "wall_seconds": round(measured.wall_seconds, 1),
        "speedup": round(hours * HOUR_MS / 1000 / measured.wall_seconds),
        "interval_minutes": segment_interval(HOURLY_RETENTION_MS) // MINUTE_MS,
    }
    result.plots.append(
        plots.against(
            plot_path(NAME),
            "Hourly retention: state over event time",
            "event time (hours)",
            {"changelog records held": [(s.event_hours, s.changelog_held) for s in samples]},
            "records",
            {"RocksDB on disk (MiB)": [(s.event_hours, s.disk_bytes / MiB) for s in samples]},
            "MiB",
        )
    )
    return result
