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
top. A second run (details only) makes those small, to show what remains.
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
    tight_variant: bool = True  # a second worker with small buffers outside the bound


FULL = Params(partitions=64, records=200_000, value_bytes=1024, memory_bytes=64 * MiB)
QUICK = Params(
    partitions=64,
    records=5_000,
    value_bytes=1024,
    memory_bytes=64 * MiB,
    commit_interval_ms=200,
    settle_seconds=0.2,
    tight_variant=False,
)
# The buffers outside rocksdb.memory.bytes, made small for the second run.
TIGHT_BUFFERS: tuple[tuple[str, object], ...] = (
    ("statestore.uncommitted.max.bytes", 8 * MiB),
    ("kafka.queued.max.messages.kbytes", 8192),
)


def _records(params: Params) -> list[Record]:
    filler = bytes(range(256)) * (params.value_bytes // 256 + 1)
    return [
        (f"key-{i:09d}".encode(), filler[i % 256 : i % 256 + params.value_bytes])
        for i in range(params.records)
    ]


@dataclass(frozen=True)
class Measured:
    idle: float  # RSS once ready, 64 empty stores open (bytes)
    peak: float  # VmHWM at the end (bytes)
    uncommitted: float  # largest worker_uncommitted_bytes seen
    processing_seconds: float
    samples: list[tuple[float, float]]
    marks: dict[str, float]


def run(ctx: RunContext, params: Params) -> Result:
    result = Result(NAME, TITLE)
    records = _records(params)
    main = _measure(ctx, params, records, "worker", params.extra_settings)
    bound = float(params.memory_bytes)
    state_mib = params.records * (params.value_bytes + 13) / MiB
    result.rows += [
        Row(
            metric="peak RSS",
            measured=main.peak / MiB,
            measured_label=f"{params.partitions} stores",
            baseline=bound / MiB,
            baseline_label="rocksdb.memory.bytes",
            unit="MiB",
        ),
        Row(
            metric="RSS growth over idle",
            measured=(main.peak - main.idle) / MiB,
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
        "produced as a backlog once the worker was ready. The bound covers RocksDB's block "
        "cache and memtables; the uncommitted write buffers "
        "(`statestore.uncommitted.max.bytes`, 64 MiB by default), librdkafka's fetch queue "
        "(`queued.max.messages.kbytes`, 64 MiB by default) and the producer's queue are "
        "outside it.",
        _line("Defaults", main),
    ]
    if params.tight_variant:
        tight = _measure(ctx, params, records, "worker-tight", TIGHT_BUFFERS)
        result.details.append(
            _line(
                "Second run with the buffers outside the bound made small ("
                + ", ".join(f"`{k}={v}`" for k, v in TIGHT_BUFFERS)
                + "), to see what RocksDB and the rest hold",
                tight,
            )
        )
    result.plots.append(
        plots.memory(ctx.plot_path(NAME), main.samples, params.memory_bytes, main.idle, main.marks)
    )
    return result


def _line(label: str, m: Measured) -> str:
    return (
        f"{label}: RSS idle (64 empty stores open) {m.idle / MiB:,.0f} MiB, peak (VmHWM) "
        f"{m.peak / MiB:,.0f} MiB, growth {(m.peak - m.idle) / MiB:,.0f} MiB; largest "
        f"`worker_uncommitted_bytes` seen {m.uncommitted / MiB:,.1f} MiB; the backlog took "
        f"{m.processing_seconds:.1f}s to process."
    )


def _measure(
    ctx: RunContext,
    params: Params,
    records: list[Record],
    name: str,
    extra: tuple[tuple[str, object], ...],
) -> Measured:
    """One worker on a broker of its own, from launch to its backlog committed."""
    broker = start_broker(ctx, f"broker-{name}")
    bootstrap = broker.bootstrap
    app_id = new_application_id(f"bench-{name}")
    create_topics(bootstrap, {MEMORY_TOPIC: params.partitions})
    settings = worker_settings(
        bootstrap,
        app_id,
        {
            "rocksdb.memory.bytes": params.memory_bytes,
            "commit.interval.ms": params.commit_interval_ms,
            "num.standby.replicas": 0,
            **dict(extra),
        },
    )
    worker = start_worker(ctx, name, settings, app="benchmarks.apps:memory_app")
    pid = worker.pid
    assert pid is not None
    marks: dict[str, float] = {}
    uncommitted: list[float] = []
    processed = lambda: metric_or_zero(worker, "worker_processed_records_total")  # noqa: E731
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
        before = processed()
        marks["produce"] = time.monotonic()
        produce(bootstrap, MEMORY_TOPIC, records)
        marks["produced"] = time.monotonic()

        def done() -> bool:
            uncommitted.append(metric_or_zero(worker, "worker_uncommitted_bytes"))
            return processed() - before >= params.records

        wait_for(done, max(120.0, params.records / 1000), "every record processed", 0.2, [worker])
        marks["processed"] = time.monotonic()
        time.sleep(2.0 * params.commit_interval_ms / 1000)  # the last commits
        peak = float(rss_bytes(pid)[1])
    stop_worker(worker)
    broker.stop(timeout=3.0)  # idempotent: the context's clean-up may call it again
    return Measured(
        idle=idle,
        peak=peak,
        uncommitted=max(uncommitted, default=0.0),
        processing_seconds=marks["processed"] - marks["produce"],
        samples=rss.samples,
        marks=marks,
    )
