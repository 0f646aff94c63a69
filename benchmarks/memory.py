"""Memory: peak RSS of a worker with 64 open stores versus its configured memory bound.

Issue 8, item 5: "peak RSS with 64 open stores of 100 MB each, versus the configured
bound". A 64-partition topic read by a one-store topology (:func:`benchmarks.apps.memory_app`)
gives one worker 64 tasks, each with its own RocksDB.

The stores are filled before the worker starts, not through it: 6.4 GB through the worker
(produce, process, changelog, commit) takes several minutes on this machine, written
straight into RocksDB it takes 25-50 s. Each task's store is written with
``worker.state.store.Store`` at the path the worker will use, with committed changelog
offset 0, and each changelog partition gets one record (offset 0), so the worker finds
consistent state (a stored offset beyond the changelog's end would be wiped), opens it
as initial standbys and resumes with nothing to restore. Values are incompressible, so
the stores are as large on disk as their data.

Once the worker is ready (64 filled stores open) its RSS is the *idle* figure; then a
backlog of new keys with 1 KiB values is produced and processed, while /proc is sampled.
The peak is the kernel's high-water mark (VmHWM) at the end.

The configured bound is :attr:`worker.config.Settings.memory_bound_bytes`:
``rocksdb.memory.bytes`` + 2 x ``statestore.uncommitted.max.bytes`` +
``input.buffer.max.bytes`` + ``output.buffer.max.bytes``. Rows: peak RSS versus idle +
that bound, and the growth over idle versus the bound. A second run (details only) uses
the buffer sizes the worker had before they joined the bound, for comparison.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka as ck

from benchmarks import plots
from benchmarks.apps import MEMORY_STORE, MEMORY_TOPIC
from benchmarks.harness import (
    BenchmarkFailed,
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
from benchmarks.sampling import Sampler, rss_bytes
from worker.config import Settings
from worker.state.rocksdb_env import WRITE_BUFFER_RATIO

NAME = "memory"
TITLE = "Memory"
MiB = 1024 * 1024
MB = 1000 * 1000
_KEY_BYTES = 12  # "pp-nnnnnnnnn"
_BATCH_RECORDS = 10_000


@dataclass(frozen=True)
class Params:
    partitions: int
    store_bytes: int  # data written into each store before the worker starts
    records: int  # backlog processed by the running worker (new keys)
    value_bytes: int
    memory_bytes: int
    commit_interval_ms: int = 1000
    settle_seconds: float = 1.0  # after readiness, before the idle RSS is read
    extra_settings: tuple[tuple[str, object], ...] = ()  # for experiments: more --set
    previous_variant: bool = True  # a second worker with the former buffer sizes


FULL = Params(
    partitions=64, store_bytes=100 * MB, records=200_000, value_bytes=1024, memory_bytes=64 * MiB
)
QUICK = Params(
    partitions=64,
    store_bytes=1 * MB,
    records=5_000,
    value_bytes=1024,
    memory_bytes=64 * MiB,
    commit_interval_ms=200,
    settle_seconds=0.2,
    previous_variant=False,
)
# The buffer sizes before they joined the bound: librdkafka's defaults (64 MiB prefetch
# per consumer, 1 GiB producer queue) and 64 MiB of uncommitted writes.
PREVIOUS_BUFFERS: tuple[tuple[str, object], ...] = (
    ("statestore.uncommitted.max.bytes", 64 * MiB),
    ("input.buffer.max.bytes", 128 * MiB),
    ("output.buffer.max.bytes", 1024 * MiB),
)


def _records(params: Params) -> list[Record]:
    filler = bytes(range(256)) * (params.value_bytes // 256 + 1)
    return [
        (f"key-{i:09d}".encode(), filler[i % 256 : i % 256 + params.value_bytes])
        for i in range(params.records)
    ]


def _settings(params: Params, extra: Sequence[tuple[str, object]]) -> dict[str, object]:
    return {
        "rocksdb.memory.bytes": params.memory_bytes,
        "commit.interval.ms": params.commit_interval_ms,
        "num.standby.replicas": 0,
        **dict(extra),
    }


def _validated(params: Params, extra: Sequence[tuple[str, object]]) -> Settings:
    """The worker's settings for these parameters, validated like the worker's."""
    values = {k: v for k, v in _settings(params, extra).items() if not k.startswith("kafka.")}
    return Settings.model_validate(values)


def configured_bound(params: Params, extra: Sequence[tuple[str, object]]) -> int:
    """The worker's ``memory_bound_bytes`` for these settings (validated like the worker's)."""
    bound = _validated(params, extra).memory_bound_bytes
    if bound is None:
        raise BenchmarkFailed("statestore.uncommitted.max.bytes=-1 leaves memory unbounded")
    return bound


@dataclass(frozen=True)
class WorkerRun:
    """One worker's memory from launch to its backlog committed; bytes unless noted."""

    bound: int  # the configured bound (bytes)
    idle: float  # RSS once ready, the filled stores open (bytes)
    peak: float  # VmHWM at the end (bytes)
    uncommitted: float  # largest worker_uncommitted_bytes seen
    cache_idle: float  # worker_rocksdb_cache_bytes at the idle figure
    cache: float  # largest worker_rocksdb_cache_bytes seen (memtables included)
    memtables: float  # largest worker_rocksdb_memtable_bytes seen
    prefill_seconds: float
    processing_seconds: float
    samples: list[tuple[float, float]]
    marks: dict[str, float]


@dataclass(frozen=True)
class Measured:
    """What the memory runs observed."""

    params: Params
    main: WorkerRun  # with the settings of ``params``
    previous: WorkerRun | None  # with PREVIOUS_BUFFERS, when ``params.previous_variant``


def measure(ctx: RunContext, params: Params) -> Measured:
    """The worker with ``params``' settings; then, if asked, with the earlier buffer sizes."""
    records = _records(params)
    main = _run_worker(ctx, params, records, "worker", params.extra_settings)
    previous = None
    if params.previous_variant:
        previous = _run_worker(ctx, params, records, "worker-previous", PREVIOUS_BUFFERS)
    return Measured(params, main, previous)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """Peak RSS and growth against the configured bound, where the growth went, the plot."""
    params, main = measured.params, measured.main
    result = Result(NAME, TITLE)
    rocksdb = float(params.memory_bytes)
    result.rows += [
        Row(
            metric="peak RSS",
            measured=main.peak / MiB,
            measured_label=f"{params.partitions} stores of {params.store_bytes / MB:,.0f} MB",
            baseline=(main.idle + main.bound) / MiB,
            baseline_label="idle RSS + configured bound",
            unit="MiB",
            target=Target("<=", 1.0, "proposed: the configured bound holds"),
        ),
        Row(
            metric="RSS growth over idle",
            measured=(main.peak - main.idle) / MiB,
            measured_label="peak - idle",
            baseline=main.bound / MiB,
            baseline_label="configured bound (memory_bound_bytes)",
            unit="MiB",
            target=Target("<=", 1.0, "proposed: the configured bound holds"),
        ),
    ]
    result.facts = {
        "stores": params.partitions,
        "memory_mib": params.memory_bytes // MiB,
        "commit_interval_ms": params.commit_interval_ms,
        "store_mb": params.store_bytes / MB,
        "value_bytes": params.value_bytes,
        "state_gb": params.partitions * params.store_bytes / 1e9,
        "records": params.records,
        "backlog_mib": params.records * (params.value_bytes + _KEY_BYTES) / MiB,
        "previous_buffers": ", ".join(f"`{k}={v}`" for k, v in PREVIOUS_BUFFERS),
    }
    runs = [("defaults", main)] + [("the buffer sizes before", m) for m in [measured.previous] if m]
    result.details += [_runs(runs, rocksdb), _breakdown(main, params)]
    result.plots.append(
        plots.memory_budget(
            plot_path(NAME),
            main.samples,
            main.bound,
            params.memory_bytes,
            main.idle,
            main.marks,
        )
    )
    return result


def _runs(runs: list[tuple[str, WorkerRun]], rocksdb: float) -> str:
    headers = ["run", "configured bound", "RSS idle", "peak RSS (VmHWM)", "growth"]
    headers += ["growth / bound", "growth / `rocksdb.memory.bytes`"]
    headers += ["largest `worker_uncommitted_bytes`", "filling the stores (s)", "the backlog (s)"]
    rows = [
        [label, _mib(m.bound), _mib(m.idle), _mib(m.peak), _mib(m.peak - m.idle)]
        + [f"{(m.peak - m.idle) / m.bound:.2f}x", f"{(m.peak - m.idle) / rocksdb:.2f}x"]
        + [f"{m.uncommitted / MiB:,.1f} MiB", f"{m.prefill_seconds:.0f}"]
        + [f"{m.processing_seconds:.1f}"]
        for label, m in runs
    ]
    return table(headers, rows)


def _mib(value: float) -> str:
    return f"{value / MiB:,.0f} MiB"


def _breakdown(m: WorkerRun, params: Params) -> str:
    """Where the growth over idle went, from the worker's own gauges (sampled every 0.2 s,
    so the largest values seen, not necessarily at the moment of the RSS peak)."""
    growth = m.peak - m.idle
    cache_growth = max(0.0, m.cache - m.cache_idle)
    budget = params.memory_bytes * WRITE_BUFFER_RATIO  # RocksDBEnv's write-buffer budget
    settings = _validated(params, params.extra_settings)
    queues = settings.input_buffer_max_bytes + settings.output_buffer_max_bytes
    rows = [
        ["growth over idle", _mib(growth)],
        ["RocksDB cache, idle / largest seen", f"{_mib(m.cache_idle)} / {_mib(m.cache)}"],
        ["RocksDB memtables, largest seen / their budget", f"{_mib(m.memtables)} / {_mib(budget)}"],
        ["of the growth: the RocksDB cache's", _mib(cache_growth)],
        ["of the growth: store write buffers, at most 2 x", f"{m.uncommitted / MiB:,.1f} MiB"],
        ["of the growth: the rest", _mib(growth - cache_growth - 2 * m.uncommitted)],
        ["the bound's share for librdkafka's queues", _mib(queues)],
    ]
    return table(["where the growth went (defaults run)", ""], rows)


def _fill_stores(
    state_root: Path, application_id: str, partitions: Sequence[int], params: Params, seed: int
) -> None:
    """Write ``params.store_bytes`` into each partition's store, committed at changelog offset 0.

    Runs in a child process (two at once: RocksDB writes hold the GIL). Values are slices
    of one random buffer at unrelated offsets: no block of RocksDB compresses.
    """
    from worker.assignment.task_id import TaskId
    from worker.observability import configure_logging
    from worker.state.directory import StateDirectory
    from worker.state.rocksdb_env import RocksDBEnv
    from worker.state.store import Store

    configure_logging("warning")  # 64 "store.created" lines would bury the report
    pool = random.Random(seed).randbytes(MiB + params.value_bytes)
    env = RocksDBEnv(params.memory_bytes)
    directory = StateDirectory(state_root, application_id)
    changelog = f"{application_id}-{MEMORY_STORE}-changelog"
    per_store = params.store_bytes // (params.value_bytes + _KEY_BYTES)
    for p in partitions:
        store = Store.open(directory.store_path(TaskId(0, p), MEMORY_STORE), env, MEMORY_STORE)
        try:
            batch = store.restore_batch()
            for i in range(per_store):
                start = (i * 4099 + p * 7919) % MiB
                batch.put(f"{p:02d}-{i:09d}".encode(), pool[start : start + params.value_bytes])
                if batch.len() >= _BATCH_RECORDS:
                    store.write_restored(batch, {(changelog, p): 0})
                    batch = store.restore_batch()
            store.write_restored(batch, {(changelog, p): 0})
            store.flush()
        finally:
            store.close()


def _prefill(bootstrap: str, state_root: Path, application_id: str, params: Params) -> float:
    """Fill every store and give each changelog partition its offset 0; return the seconds."""
    started = time.monotonic()
    changelog = f"{application_id}-{MEMORY_STORE}-changelog"
    create_topics(
        bootstrap, {changelog: params.partitions}, {changelog: {"cleanup.policy": "compact"}}
    )
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(params.partitions):
        producer.produce(changelog, b"prefilled", f"{p:02d}-000000000".encode(), partition=p)
    if producer.flush(30):
        raise BenchmarkFailed("the changelog's first records were not acknowledged")
    halves = [list(range(k, params.partitions, 2)) for k in range(2)]
    with ProcessPoolExecutor(2) as pool:
        futures = [
            pool.submit(_fill_stores, state_root, application_id, part, params, seed)
            for seed, part in enumerate(halves)
        ]
        for future in futures:
            future.result()
    return time.monotonic() - started


def _run_worker(
    ctx: RunContext,
    params: Params,
    records: list[Record],
    name: str,
    extra: tuple[tuple[str, object], ...],
) -> WorkerRun:
    """One worker on a broker of its own, from launch to its backlog committed."""
    bound = configured_bound(params, extra)
    broker = start_broker(ctx, f"broker-{name}")
    bootstrap = broker.bootstrap
    app_id = new_application_id(f"bench-{name}")
    create_topics(bootstrap, {MEMORY_TOPIC: params.partitions})
    state_root = ctx.path(name, "state")
    state_root.mkdir(parents=True, exist_ok=True)
    prefill_seconds = _prefill(bootstrap, state_root, app_id, params)
    settings = worker_settings(bootstrap, app_id, _settings(params, extra))
    worker = start_worker(
        ctx, name, settings, app="benchmarks.apps:memory_app", state_dir=state_root
    )
    pid = worker.pid
    assert pid is not None
    marks: dict[str, float] = {}
    uncommitted: list[float] = []
    cache: list[float] = []
    memtables: list[float] = []
    processed = lambda: metric_or_zero(worker, "worker_processed_records_total")  # noqa: E731
    with Sampler(lambda: float(rss_bytes(pid)[0]), 0.1) as rss:
        worker.wait_ready(300)
        wait_for(
            lambda: metric_or_zero(worker, "worker_tasks", kind="active") == params.partitions,
            120,
            f"{params.partitions} active tasks",
            alive=[worker],
        )
        time.sleep(params.settle_seconds)  # start-up garbage settles before the idle figure
        idle = float(rss_bytes(pid)[0])
        cache_idle = metric_or_zero(worker, "worker_rocksdb_cache_bytes")
        before = processed()
        marks["produce"] = time.monotonic()
        produce(bootstrap, MEMORY_TOPIC, records)
        marks["produced"] = time.monotonic()

        def done() -> bool:
            uncommitted.append(metric_or_zero(worker, "worker_uncommitted_bytes"))
            cache.append(metric_or_zero(worker, "worker_rocksdb_cache_bytes"))
            memtables.append(metric_or_zero(worker, "worker_rocksdb_memtable_bytes"))
            return processed() - before >= params.records

        wait_for(done, max(120.0, params.records / 1000), "every record processed", 0.2, [worker])
        marks["processed"] = time.monotonic()
        time.sleep(2.0 * params.commit_interval_ms / 1000)  # the last commits
        peak = float(rss_bytes(pid)[1])
    stop_worker(worker)
    broker.stop(timeout=3.0)  # idempotent: the context's clean-up may call it again
    return WorkerRun(
        bound=bound,
        idle=idle,
        peak=peak,
        uncommitted=max(uncommitted, default=0.0),
        cache_idle=cache_idle,
        cache=max(cache, default=0.0),
        memtables=max(memtables, default=0.0),
        prefill_seconds=prefill_seconds,
        processing_seconds=marks["processed"] - marks["produce"],
        samples=rss.samples,
        marks=marks,
    )
