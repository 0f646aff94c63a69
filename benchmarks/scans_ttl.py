"""Scans and TTL: a store view's scan against the raw RocksDB iterator, what a TTL sweep
costs per expired key, and a TTL store under a churn of distinct keys (issue 21).

1. Scan rate. A store of ``keys`` committed ``str`` keys with small JSON values, read
   whole, alternately: by a raw rocksdict iterator over the same RocksDB (keys and values
   as bytes, nothing decoded: the ceiling), and by ``KeyValueStore.range()`` (the merge
   with the write buffer, the serdes' decoding), once with an empty buffer and once with
   a tenth of the keys rewritten and uncommitted. Thread CPU time of the reading thread;
   the best of each way is compared.
2. Sweep cost. A ``TtlStore`` holding ``sweep_keys`` keys, all expired; sweeps (each
   within its budget) and commits until none is left, against deleting the same keys
   from a plain store and committing (what expiring them by hand costs at least).
3. Churn. A worker of ``benchmarks.apps:ttl_app`` (TTL ``TTL_MS``) takes ``churn``
   records with distinct keys, one every ``step_ms`` of record time, in ``chunks``; after
   each, the store's bytes on disk, the changelog's records and live keys (read
   incrementally, tombstones applied: ``benchmarks/ttl_churn.py``) and the evictions.
   About ``TTL_MS / step_ms`` keys are alive at any stream time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks.apps import TTL_MS, TTL_TOPIC
from benchmarks.harness import (
    RunContext,
    new_application_id,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import create_topics
from benchmarks.punctuator_scan import measure_punctuator_scan, raw_count
from benchmarks.results import PlotPath, Result, Row, table
from benchmarks.ttl_churn import (
    ChangelogTail,
    changelog_topic,
    disk_bytes,
    produce_churn,
    store_dirs,
    stored_entries,
)
from worker.processing.store_views import KeyValueStore
from worker.serde import JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store
from worker.state.ttl_store import TtlStore, open_store

NAME = "scans_ttl"
TITLE = "Scans and TTL"
PARTITIONS = 2


@dataclass(frozen=True)
class Params:
    keys: int  # scanned store
    sweep_keys: int
    churn: int  # distinct keys through the TTL store
    chunks: int
    step_ms: int = 1
    runs: int = 3


FULL = Params(keys=100_000, sweep_keys=200_000, churn=1_000_000, chunks=10)
QUICK = Params(keys=10_000, sweep_keys=10_000, churn=20_000, chunks=4, runs=1)


@dataclass(frozen=True)
class Sample:
    records: int  # input records processed
    disk_bytes: int
    changelog_records: int
    changelog_live: int
    evictions: float


@dataclass(frozen=True)
class Measured:
    params: Params
    scans: dict[str, list[float]]  # way -> CPU seconds of each run
    sweep_seconds: float
    delete_seconds: float
    churn: list[Sample]
    stored_entries: int  # user keys and index entries in RocksDB after the churn
    punctuator: dict[str, list[float]]  # way -> CPU seconds of each full scan of ``keys``


def measure(ctx: RunContext, params: Params) -> Measured:
    scans = _scans(ctx.path("scan-store"), params)
    sweep, delete = _sweep_cost(ctx.path("sweep"), params.sweep_keys)
    broker = start_broker(ctx)
    punctuator = measure_punctuator_scan(
        ctx.path("punctuator"), broker.bootstrap, params.keys, params.runs
    )
    churn, entries = _churn(ctx, broker.bootstrap, params)
    return Measured(params, scans, sweep, delete, churn, entries, punctuator)


def _cpu(run: Callable[[], int], expected: int) -> float:
    started = time.thread_time()
    found = run()
    seconds = time.thread_time() - started
    if found != expected:
        raise RuntimeError(f"scan read {found} pairs, expected {expected}")
    return seconds


def _scans(path: Path, params: Params) -> dict[str, list[float]]:
    env = RocksDBEnv(64 * MiB)
    store = Store.open(path, env, "scan")
    view = KeyValueStore("scan", store, STR, JSON, read_only=False)
    for i in range(params.keys):
        view.put(f"key-{i:08d}", {"n": i, "seen": True})
    store.commit({})
    store.flush()
    store.close()
    ways: dict[str, list[float]] = {"raw iterator": [], "view": [], "view, 10% buffered": []}
    for _ in range(params.runs):
        ways["raw iterator"].append(_cpu(functools.partial(raw_count, path), params.keys))
        store = Store.open(path, env, "scan")
        try:
            view = KeyValueStore("scan", store, STR, JSON, read_only=False)
            ways["view"].append(_cpu(functools.partial(_view_count, view), params.keys))
            for i in range(0, params.keys, 10):
                view.put(f"key-{i:08d}", {"n": -i, "seen": False})
            ways["view, 10% buffered"].append(
                _cpu(functools.partial(_view_count, view), params.keys)
            )
            store.discard_pending()
        finally:
            store.close()
    return ways


def _view_count(view: KeyValueStore) -> int:
    count = 0
    with view.range() as found:
        for _key, _value in found:
            count += 1
    return count


def _sweep_cost(path: Path, keys: int) -> tuple[float, float]:
    """CPU seconds to sweep ``keys`` expired keys (commits included), and to delete them
    from a plain store."""
    env = RocksDBEnv(64 * MiB)
    store = open_store(path / "ttl", env, "ttl", ttl_ms=1)
    assert isinstance(store, TtlStore)
    plain = Store.open(path / "plain", env, "plain")
    try:
        for i in range(keys):
            key = i.to_bytes(8, "big")
            store.put_at(key, b"v" * 32, write_ms=i)
            plain.put(key, b"v" * 32)
        store.commit({})
        plain.commit({})
        store.sweep(now_ms=-1)  # nothing due: the budget starts from nothing written
        started = time.thread_time()
        evicted = 0
        while evicted < keys:
            evicted += store.sweep(now_ms=keys + 1).evicted
            store.commit({})
        sweep = time.thread_time() - started
        started = time.thread_time()
        for i in range(keys):
            plain.delete(i.to_bytes(8, "big"))
        plain.commit({})
        delete = time.thread_time() - started
    finally:
        store.close()
        plain.close()
    return sweep, delete


def _churn(ctx: RunContext, bootstrap: str, params: Params) -> tuple[list[Sample], int]:
    create_topics(bootstrap, {TTL_TOPIC: PARTITIONS})
    app_id = new_application_id("ttl")
    settings = worker_settings(bootstrap, app_id, {"commit.interval.ms": 200})
    worker = start_worker(ctx, "ttl", settings, app="benchmarks.apps:ttl_app")
    worker.wait_ready(120)
    tail = ChangelogTail(bootstrap, changelog_topic(app_id))
    samples: list[Sample] = []
    per_chunk = params.churn // params.chunks
    for chunk in range(params.chunks):
        produce_churn(bootstrap, TTL_TOPIC, chunk * per_chunk, per_chunk, params.step_ms)
        done = (chunk + 1) * per_chunk
        wait_for(
            lambda: worker.metric("worker_processed_records_total") >= done,  # noqa: B023
            600,
            f"{done} records processed",
            interval=0.5,
            alive=[worker],
        )
        wait_for(
            lambda: worker.metric("worker_uncommitted_bytes") == 0, 60, "a commit", alive=[worker]
        )
        tail.read()
        samples.append(
            Sample(
                done,
                disk_bytes(store_dirs(worker.state_dir)),
                tail.records,
                tail.live,
                _evictions(worker),
            )
        )
    stop_worker(worker)
    return samples, stored_entries(store_dirs(worker.state_dir))


def _evictions(worker: Any) -> float:
    return sum(
        worker.metric("worker_ttl_evictions_total", task=f"0_{p}", store="recent")
        for p in range(PARTITIONS)
    )


def report(measured: Measured, plot_path: PlotPath) -> Result:
    p = measured.params
    best = {way: min(seconds) for way, seconds in measured.scans.items()}
    rate = {way: p.keys / seconds for way, seconds in best.items()}
    punctuated = {way: p.keys / min(seconds) for way, seconds in measured.punctuator.items()}
    per_key_sweep = measured.sweep_seconds / p.sweep_keys * 1e6
    per_key_delete = measured.delete_seconds / p.sweep_keys * 1e6
    last = measured.churn[-1]
    rows = [
        Row("scan, pairs/s", rate["view"], "store view", rate["raw iterator"], "raw iterator", "pairs/s"),
        Row(
            "scan with uncommitted writes, pairs/s", rate["view, 10% buffered"],
            "store view, 10% buffered", rate["raw iterator"], "raw iterator", "pairs/s",
        ),
        Row(
            "a stream punctuator scanning the store, pairs/s", punctuated["punctuator scan"],
            "scan in a stream punctuation", punctuated["raw iterator"], "raw iterator", "pairs/s",
        ),
        Row("TTL sweep, µs per expired key", per_key_sweep, "sweep + commit", per_key_delete, "delete + commit", "µs"),
        Row(
            "TTL store under a churn of distinct keys: changelog live keys", last.changelog_live,
            "live keys at the end", p.churn, "distinct keys written", "keys",
        ),
    ]  # fmt: skip
    scans = table(
        ["way", *[f"run {i + 1}, ms" for i in range(p.runs)], "best, pairs/s"],
        [
            [way, *[f"{s * 1000:,.0f}" for s in seconds], f"{p.keys / min(seconds):,.0f}"]
            for way, seconds in [
                *measured.scans.items(),
                *((f"{way} (punctuation run)", sec) for way, sec in measured.punctuator.items()),
            ]
        ],
    )
    churn = table(
        ["records in", "RocksDB MiB", "changelog records", "changelog live keys", "evictions"],
        [
            [
                f"{s.records:,}",
                f"{s.disk_bytes / MiB:,.1f}",
                f"{s.changelog_records:,}",
                f"{s.changelog_live:,}",
                f"{s.evictions:,.0f}",
            ]
            for s in measured.churn
        ],
        left=0,
    )
    facts = {
        "keys": p.keys,
        "sweep_keys": p.sweep_keys,
        "churn": p.churn,
        "chunks": p.chunks,
        "step_ms": p.step_ms,
        "ttl_ms": TTL_MS,
        "alive": TTL_MS // p.step_ms,
        "partitions": PARTITIONS,
        "stored_entries": measured.stored_entries,
    }
    curve = [
        (s.records, s.changelog_records, s.changelog_live, s.disk_bytes / MiB)
        for s in measured.churn
    ]
    title = f"A TTL store under {p.churn:,} distinct keys"
    plot = plots.churn(plot_path(NAME), title, curve)
    return Result(NAME, TITLE, rows, [scans, churn], [plot], facts=facts)
