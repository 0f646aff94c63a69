"""Memory: peak RSS of a worker with 64 open stores versus ``rocksdb.memory.bytes``.

Issue 8, item 5, kept small for now (64 stores of a few MiB, not 100 MB each). A
64-partition topic read by a one-store topology (:func:`benchmarks.apps.memory_app`)
gives one worker 64 tasks, each with its own RocksDB. Once it is ready (64 empty stores
open) its RSS is the *idle* figure; then a backlog of distinct keys with 1 KiB values is
produced and processed, growing every store, while /proc is sampled. The peak is the
kernel's high-water mark (VmHWM) at the end.

Rows: peak RSS versus the bound, and the growth over idle versus the bound. The bound
covers RocksDB's block cache and memtables only; librdkafka's fetch queue, the producer
queue and the uncommitted write buffers (``statestore.uncommitted.max.bytes``) come on
top, which is what the second row shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from benchmarks import plots
from benchmarks.apps import MEMORY_TOPIC
from benchmarks.harness import (
    Record,
    RunContext,
    Sampler,
    create_topics,
    metric_or_zero,
    new_application_id,
    produce,
    rss_bytes,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.results import Result, Row, Target

NAME = "memory"
TITLE = "Memory"
MiB = 1024 * 1024


@dataclass(frozen=True)
class Params:
    partitions: int
    records: int
    value_bytes: int
    memory_bytes: int
    commit_interval_ms: int = 1000
    settle_seconds: float = 1.0  # after readiness, before the idle RSS is read
    extra_settings: tuple[tuple[str, object], ...] = ()  # for experiments: more --set


FULL = Params(partitions=64, records=200_000, value_bytes=1024, memory_bytes=64 * MiB)
QUICK = Params(
    partitions=64,
    records=5_000,
    value_bytes=1024,
    memory_bytes=64 * MiB,
    commit_interval_ms=200,
    settle_seconds=0.2,
)


def _records(params: Params) -> list[Record]:
    filler = bytes(range(256)) * (params.value_bytes // 256 + 1)
    return [
        (f"key-{i:09d}".encode(), filler[i % 256 : i % 256 + params.value_bytes])
        for i in range(params.records)
    ]


def run(ctx: RunContext, params: Params) -> Result:
    result = Result(NAME, TITLE)
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    create_topics(bootstrap, {MEMORY_TOPIC: params.partitions})
    settings = worker_settings(
        bootstrap,
        new_application_id("bench-memory"),
        {
            "rocksdb.memory.bytes": params.memory_bytes,
            "commit.interval.ms": params.commit_interval_ms,
            "num.standby.replicas": 0,
            **dict(params.extra_settings),
        },
    )
    records = _records(params)
    launched = time.monotonic()
    worker = start_worker(ctx, "worker", settings, app="benchmarks.apps:memory_app")
    pid = worker.pid
    assert pid is not None
    marks: dict[str, float] = {}
    uncommitted: list[float] = []
    with Sampler(lambda: float(rss_bytes(pid)[0]), 0.1) as rss:
        worker.wait_ready(120)
        wait_for(
            lambda: metric_or_zero(worker, "worker_tasks", kind="active") == params.partitions,
            60,
            f"{params.partitions} active tasks",
            alive=[worker],
        )
        time.sleep(params.settle_seconds)  # start-up garbage settles before the idle figure
        idle = float(rss_bytes(pid)[0])
        marks["produce"] = time.monotonic()
        produce(bootstrap, MEMORY_TOPIC, records)
        marks["produced"] = time.monotonic()

        def done() -> bool:
            uncommitted.append(metric_or_zero(worker, "worker_uncommitted_bytes"))
            return metric_or_zero(worker, "worker_processed_records_total") >= params.records

        wait_for(done, max(120.0, params.records / 1000), "every record processed", 0.2, [worker])
        marks["processed"] = time.monotonic()
        time.sleep(2.0 * params.commit_interval_ms / 1000)  # the last commits
        peak = float(rss_bytes(pid)[1])
    stop_worker(worker)

    bound = float(params.memory_bytes)
    state_mib = params.records * (params.value_bytes + 13) / MiB
    result.rows += [
        Row(
            metric="peak RSS",
            measured=peak / MiB,
            measured_label=f"{params.partitions} stores",
            baseline=bound / MiB,
            baseline_label="rocksdb.memory.bytes",
            unit="MiB",
        ),
        Row(
            metric="RSS growth over idle",
            measured=(peak - idle) / MiB,
            measured_label="peak - idle",
            baseline=bound / MiB,
            baseline_label="rocksdb.memory.bytes",
            unit="MiB",
            target=Target("<=", 1.0, "proposed: the bound holds for what data adds"),
        ),
    ]
    result.details += [
        f"One worker, {params.partitions} tasks of a one-store topology, "
        f"`rocksdb.memory.bytes={params.memory_bytes // MiB} MiB`, "
        f"`commit.interval.ms={params.commit_interval_ms}`, other settings default. "
        f"Input: {params.records:,} distinct keys with {params.value_bytes}-byte values "
        f"(~{state_mib:,.0f} MiB of state, ~{state_mib / params.partitions:.1f} MiB per store), "
        "produced as a backlog once the worker was ready.",
        f"RSS idle (64 empty stores open): {idle / MiB:,.0f} MiB; peak (VmHWM): "
        f"{peak / MiB:,.0f} MiB; largest `worker_uncommitted_bytes` seen: "
        f"{max(uncommitted, default=0) / MiB:,.1f} MiB. Processing the backlog took "
        f"{marks['processed'] - marks['produce']:.1f}s; the worker ran "
        f"{time.monotonic() - launched:.0f}s.",
    ]
    result.plots.append(
        plots.memory(ctx.plot_path(NAME), rss.samples, params.memory_bytes, idle, marks)
    )
    return result
