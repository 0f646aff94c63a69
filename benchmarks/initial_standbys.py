"""Initial standbys (issue 4): restart with local state, opened before the join or after.

Two measurements, each with ``initial.standbys.enabled`` true and false in the same run:

1. *join to first record*: a worker builds ``state_bytes`` of local state (one store per
   task, 1 KiB values under distinct keys), stops cleanly, and is restarted over that
   state with a backlog waiting; ``worker_first_process_after_join_seconds`` (first
   assignment to first processed record) and the time from launch to the first processed
   record are read for both settings, alternating, ``runs`` times each;
2. *peak RSS with 64 task directories*: a 64-partition topic leaves 64 task directories
   with state; the worker restarts over them and its peak RSS (VmHWM) is read once it is
   ready, for both settings, against ``rocksdb.memory.bytes``.

With initial standbys the stores are opened (and checked) before the group join and
recycled when assigned; without them they are opened after the assignment arrives.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import plots
from benchmarks.apps import MEMORY_TOPIC
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
from benchmarks.kafka_io import create_topics, produce
from benchmarks.results import PlotPath, Result, Row, table
from benchmarks.sampling import rss_bytes

NAME = "initial_standbys"
TITLE = "Initial standbys: restart over local state"
APP = "benchmarks.apps:memory_app"
MEMORY_BOUND = 64 * 1024 * 1024
VALUE = 1024


@dataclass(frozen=True)
class Timing:
    """One restart: launch to first record (s), first assignment to first record (s), peak
    RSS once ready (bytes)."""

    first_record: float
    after_join: float
    peak: int


@dataclass(frozen=True)
class Params:
    state_bytes: int
    runs: int
    many_tasks: int
    many_records: int


FULL = Params(state_bytes=1024**3, runs=2, many_tasks=64, many_records=64_000)
QUICK = Params(state_bytes=8 * 1024**2, runs=1, many_tasks=64, many_records=6_400)


def _records(start: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i:012d}".encode(), os.urandom(VALUE)) for i in range(start, start + count)]


def _fill(bootstrap: str, topic: str, total: int) -> None:
    for start in range(0, total, 50_000):
        produce(bootstrap, topic, _records(start, min(50_000, total - start)))


def _build_state(
    run: RunContext, bootstrap: str, partitions: int, records: int, tag: str
) -> tuple[dict[str, object], Path, str]:
    """Local state built by the worker itself, stopped cleanly: (settings, state dir, topic)."""
    application_id = new_application_id(f"bench-initial-{tag}")
    topic = MEMORY_TOPIC  # the app reads this name: each part has a broker of its own
    create_topics(bootstrap, {topic: partitions})
    settings = worker_settings(
        bootstrap,
        application_id,
        {
            "commit.interval.ms": 1000,
            "rocksdb.memory.bytes": MEMORY_BOUND,
            "num.standby.replicas": 0,
        },
    )
    settings["application.id"] = application_id
    builder = start_worker(run, f"build-{tag}", settings, APP)
    wait_for(builder.ready, 180, "the builder ready", alive=[builder])
    _fill(bootstrap, topic, records)
    wait_for(
        lambda: metric_or_zero(builder, "worker_processed_records_total") >= records,
        900,
        f"{records} records processed into local state",
        interval=0.5,
        alive=[builder],
    )
    stop_worker(builder, timeout=120)
    return settings, builder.state_dir, topic


def _restart(
    run: RunContext,
    settings: dict[str, object],
    state_dir: Path,
    topic: str,
    bootstrap: str,
    enabled: bool,
    name: str,
    backlog: int,
) -> Timing:
    """A restart over ``state_dir`` with a backlog waiting, timed to its first record."""
    produce(bootstrap, topic, _records(10**9 + backlog, 200))  # input waiting for it
    launched = time.monotonic()
    worker = start_worker(
        run, name, {**settings, "initial.standbys.enabled": enabled}, APP, state_dir=state_dir
    )
    wait_for(
        lambda: metric_or_zero(worker, "worker_processed_records_total") > 0,
        300,
        "the first record processed after the restart",
        interval=0.02,
        alive=[worker],
    )
    first_record = time.monotonic() - launched
    after_join = worker.metric("worker_first_process_after_join_seconds")
    wait_for(worker.ready, 120, "ready", alive=[worker])
    _, peak = rss_bytes(worker.pid or 0)
    stop_worker(worker, timeout=120)
    return Timing(first_record, after_join, peak)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass(frozen=True)
class Measured:
    """What the restarts observed."""

    params: Params
    records: int  # keys in the big state
    disk_bytes: int  # the big state's directory
    timings: dict[bool, list[Timing]]  # initial standbys on/off -> restarts over the big state
    peaks: dict[bool, int]  # on/off -> peak RSS (bytes) restarting over many task directories


def measure(ctx: RunContext, params: Params) -> Measured:
    """Restarts over the big state, alternating on and off; then one of each over many
    small task directories."""
    broker = start_broker(ctx)
    records = params.state_bytes // VALUE
    settings, state_dir, topic = _build_state(ctx, broker.bootstrap, 4, records, "big")
    size = _dir_bytes(state_dir)
    timings: dict[bool, list[Timing]] = {True: [], False: []}
    for i in range(params.runs):
        for enabled in (True, False):
            timings[enabled].append(
                _restart(
                    ctx,
                    settings,
                    state_dir,
                    topic,
                    broker.bootstrap,
                    enabled,
                    f"big-{'on' if enabled else 'off'}-{i}",
                    len(timings[enabled]) + 10 * i,
                )
            )
    broker = start_broker(ctx, "broker-many")
    many, many_dir, many_topic = _build_state(
        ctx, broker.bootstrap, params.many_tasks, params.many_records, "many"
    )
    peaks = {
        enabled: _restart(
            ctx,
            many,
            many_dir,
            many_topic,
            broker.bootstrap,
            enabled,
            f"many-{'on' if enabled else 'off'}",
            1000 + int(enabled),
        ).peak
        for enabled in (True, False)
    }
    return Measured(params, records, size, timings, peaks)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """On against off: join and launch to first record, peak RSS; the runs; the plot."""
    params, records, size = measured.params, measured.records, measured.disk_bytes
    timings, peaks = measured.timings, measured.peaks

    on_join, off_join = (statistics.mean(t.after_join for t in timings[e]) for e in (True, False))
    on_first, off_first = (
        statistics.mean(t.first_record for t in timings[e]) for e in (True, False)
    )
    rows = [
        Row(
            "join to first processed record",
            on_join,
            "initial standbys on",
            off_join,
            "initial standbys off (stores opened after the assignment)",
            "s",
        ),
        Row(
            "launch to first processed record",
            on_first,
            "initial standbys on",
            off_first,
            "initial standbys off",
            "s",
        ),
        Row(
            f"peak RSS, restart over {params.many_tasks} task directories",
            peaks[True] / 2**20,
            "initial standbys on",
            peaks[False] / 2**20,
            "initial standbys off",
            "MiB",
        ),
        Row(
            f"peak RSS, {params.many_tasks} task directories, against the bound",
            peaks[True] / 2**20,
            "initial standbys on",
            MEMORY_BOUND / 2**20,
            "rocksdb.memory.bytes",
            "MiB",
        ),
    ]
    runs = [
        ["on" if enabled else "off", f"{t.first_record:.2f}", f"{t.after_join:.3f}"]
        + [f"{t.peak / 2**20:.0f}"]
        for enabled in (True, False)
        for t in timings[enabled]
    ]
    headers = ["initial standbys", "launch to first record (s)", "join to first record (s)"]
    details = [table([*headers, "peak RSS (MiB)"], runs)]
    facts = {
        "state_mib": size / 2**20,
        "records": records,
        "value": VALUE,
        "runs": params.runs,
        "many_tasks": params.many_tasks,
        "many_records": params.many_records,
    }
    plot = plots.comparison(
        plot_path(NAME),
        TITLE,
        [(r.metric, r.measured, r.baseline) for r in rows[:3]],
        ("on", "off"),
    )
    return Result(NAME, TITLE, rows=rows, details=details, plots=[plot], facts=facts)
