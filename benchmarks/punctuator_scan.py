"""A stream-time punctuator that walks a store of ``keys`` keys, run by the task layer,
against the raw RocksDB iterator over the same store in the same run (issue 21).

One task (``benchmarks.task_layer``) of a topology whose processor puts each record in a
store and whose stream punctuator scans the whole store (``store.range()``, keys and
values decoded), timing itself (thread CPU). The records fill the store within the first
interval; each "tick" record then moves stream time past the next boundary, so the
punctuation runs through the router, as in a worker, over every key, committed. Between
ticks the raw rocksdict iterator reads the same RocksDB, opened read-only beside the task.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import rocksdict

from benchmarks.harness import BenchmarkFailed, client_settings, new_application_id
from benchmarks.kafka_io import create_topics
from benchmarks.task_layer import fetch, running_tasks
from worker.assignment.task_id import TaskId
from worker.kafka.loader import produce_records
from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR
from worker.state.directory import StateDirectory
from worker.state.store_format import OFFSETS_FAMILY

TOPIC = "punctuated-keys"
STORE = "walked"
INTERVAL_MS = 1_000_000_000  # the fill stays inside the first interval
TICK = "~tick"  # moves stream time; not stored
BATCH = 500


def measure_punctuator_scan(
    workdir: Path, bootstrap: str, keys: int, runs: int
) -> dict[str, list[float]]:
    """CPU seconds of each full scan: ``"punctuator scan"`` (inside the punctuation) and
    ``"raw iterator"`` (alternating with it)."""
    create_topics(bootstrap, {TOPIC: 1})
    records = [(f"key-{i:08d}", {"n": i, "seen": True}) for i in range(keys)]
    records += [(TICK, {"run": r}) for r in range(1, runs + 1)]
    stamps = [1 + i for i in range(keys)] + [r * INTERVAL_MS for r in range(1, runs + 1)]
    produce_records(client_settings(bootstrap), TOPIC, records, STR, JSON, timestamps=stamps)
    messages = fetch(bootstrap, TOPIC)
    if len(messages) != keys + runs:
        raise BenchmarkFailed(f"fetched {len(messages)} records, not {keys + runs}")
    scans: list[tuple[int, float]] = []  # (pairs, CPU seconds) of each punctuation
    app_id = new_application_id("bench-punctuator")
    ways: dict[str, list[float]] = {"punctuator scan": [], "raw iterator": []}
    with running_tasks(workdir, bootstrap, _topology(scans), app_id, 1) as run:
        run.feed(messages[:keys], BATCH)  # the first batch punctuates at boundary 0
        run.parts.committer.commit()
        path = StateDirectory(workdir / app_id, app_id).store_path(TaskId(0, 0), STORE)
        for tick in messages[keys:]:
            scans.clear()
            if run.feed([tick], 1) != 1 or len(scans) != 1 or scans[0][0] != keys:
                raise BenchmarkFailed(f"a tick's punctuation scanned {scans}, not {keys} keys")
            ways["punctuator scan"].append(scans[0][1])
            started = time.thread_time()
            if raw_count(path) != keys:
                raise BenchmarkFailed(f"the raw iterator did not read {keys} pairs")
            ways["raw iterator"].append(time.thread_time() - started)
            run.parts.committer.commit()
    return ways


def _topology(scans: list[tuple[int, float]]) -> Any:
    def fill(ctx: ProcessorContext, key: str, value: dict[str, Any]) -> None:
        if key != TICK:
            ctx.store(STORE).put(key, value)

    def walk(ctx: ProcessorContext, _now_ms: int) -> None:
        started, count = time.thread_time(), 0
        with ctx.store(STORE).range() as found:
            for _key, _value in found:
                count += 1
        scans.append((count, time.thread_time() - started))

    def init(ctx: ProcessorContext) -> None:
        ctx.schedule(INTERVAL_MS, "stream", walk)

    return (
        Topology()
        .add_source("keys", TOPIC, key_serde=STR, value_serde=JSON)
        .add_store(STORE, key_serde=STR, value_serde=JSON)
        .add_processor("fill", fill, parents=["keys"], stores=[STORE], init=init)
        .build()
    )


def raw_count(path: Path) -> int:
    """Every pair of the RocksDB at ``path`` read as bytes, nothing decoded (the ceiling of
    a scan); opened read-only, so a task may hold the store meanwhile. Returns the count."""
    options = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(
        str(path),
        options,
        column_families={OFFSETS_FAMILY: options},
        access_type=rocksdict.AccessType.read_only(),
    )
    count = 0
    try:
        cursor = db.iter()
        cursor.seek_to_first()
        while cursor.valid():
            cursor.key()
            cursor.value()
            count += 1
            cursor.next()
        del cursor
    finally:
        db.close()
    return count
