"""A stream-stream join's records/s and store size against its window (issue 31, item 9).

One inner join (``orders.join(shipments, joiner, JoinWindows(w, w, grace))``, the DSL)
over the same input at a few window sizes, in one process of its own, through the real
task layer (:func:`benchmarks.task_layer.running_tasks`), the two topics' records fed in
time order, a commit every ``commit_every`` records, as :mod:`benchmarks.join_cost` does:

* records/s: input records per CPU second of the thread doing the work (``1e6 /`` its CPU
  us per record), the best of ``reps`` runs, each window against the smallest;
* store size: the entries both join buffers hold once the input is processed (read
  back from every task's stores), against the records whose time is within the
  buffers' retention (``before + after + grace``) of the last one: what the window
  obliges them to keep. Above 1: what expiry by whole segments keeps beside it.

Each side writes ``rate`` records per second of event time over ``keys`` keys, so an
arrival finds about ``2 w rate / keys`` partners.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck

from benchmarks.harness import BenchmarkFailed, RunContext, new_application_id, start_broker
from benchmarks.in_process import cpu_us_per_record
from benchmarks.kafka_io import Record, create_topics, produce, raw_consumer
from benchmarks.results import PlotPath, Result, Row, table
from benchmarks.spawned import measure_in_child
from benchmarks.task_layer import RunningTasks, fetch, running_tasks
from worker.dsl import StreamsBuilder
from worker.operators.joins.stream_stream import store_names
from worker.processing.join_windows import JoinWindows
from worker.processing.topology import BuiltTopology
from worker.serde import JSON, STR

NAME = "join_windows"
TITLE = "Stream-stream join: records/s and store size against the window"
ORDERS = "jw-orders"
SHIPMENTS = "jw-shipments"
OUTPUT = "jw-joined"
JOIN = "orders-shipments"
PARTITIONS = 4
CHILD_TIMEOUT_S = 900.0
BASE_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Params:
    records: int  # per side
    keys: int
    rate: int  # records per second of event time, per side
    windows_s: tuple[int, ...]  # before = after, seconds
    grace_s: int = 10
    reps: int = 3
    commit_every: int = 30_000


FULL = Params(records=100_000, keys=20_000, rate=200, windows_s=(10, 60, 120))
QUICK = Params(records=5_000, keys=200, rate=100, windows_s=(5, 30), reps=1, commit_every=2_000)


@dataclass(frozen=True)
class Window:
    window_s: int
    cpu_us: list[float]  # CPU us per input record, each run
    outputs: int  # joined records of one run
    stored: int  # entries both buffers held at the end
    stored_bytes: int  # their keys' and values' bytes
    obliged: int  # input records within retention of the last one


@dataclass(frozen=True)
class Measured:
    params: Params
    windows: list[Window]


def joined(window_s: int, grace_s: int, application_id: str) -> BuiltTopology:
    """``orders.join(shipments)`` within ``window_s`` either way, in the DSL."""
    builder = StreamsBuilder()
    windows = JoinWindows(window_s * 1000, window_s * 1000, grace_s * 1000)
    shipments = builder.stream(SHIPMENTS)
    orders = builder.stream(ORDERS)
    orders.join(shipments, pair, windows, name=JOIN).to(OUTPUT)
    return builder.build(application_id).build()


def pair(order: dict[str, Any], shipment: dict[str, Any]) -> dict[str, Any]:
    return {"order": order["id"], "shipment": shipment["id"]}


def _side(params: Params, seed: int, prefix: str) -> tuple[list[Record], list[int]]:
    rng = random.Random(seed)
    records, times = [], []
    for n in range(params.records):
        key = STR.serialize(f"order-{rng.randrange(params.keys):05d}")
        records.append((key, JSON.serialize({"id": f"{prefix}-{n}", "qty": rng.randrange(9)})))
        times.append(BASE_MS + n * 1000 // params.rate + seed)
    return records, times


def measure(ctx: RunContext, params: Params) -> Measured:
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    create_topics(bootstrap, {ORDERS: PARTITIONS, SHIPMENTS: PARTITIONS, OUTPUT: PARTITIONS})
    for topic, seed, prefix in ((ORDERS, 0, "o"), (SHIPMENTS, 1, "s")):
        records, times = _side(params, seed, prefix)
        produce(bootstrap, topic, records, timestamps=times)
    windows = measure_in_child(
        ctx, _runs, bootstrap, ctx.path("runs"), params, timeout_s=CHILD_TIMEOUT_S
    )
    return Measured(params, windows)


def _runs(bootstrap: str, workdir: Path, params: Params) -> list[Window]:
    records = fetch(bootstrap, ORDERS) + fetch(bootstrap, SHIPMENTS)
    if len(records) != 2 * params.records:
        raise BenchmarkFailed(f"fetched {len(records):,} records, not {2 * params.records:,}")
    records.sort(key=lambda msg: msg.timestamp()[1])
    last_ms = records[-1].timestamp()[1]
    cpu: dict[int, list[float]] = {w: [] for w in params.windows_s}
    found: dict[int, tuple[int, int, int]] = {}
    for rep in range(-1, params.reps):  # a warm-up round first
        order = params.windows_s if rep % 2 else params.windows_s[::-1]
        for window_s in order:
            app_id = new_application_id("bench-join-windows")
            topology = joined(window_s, params.grace_s, app_id)
            before = _output_end(bootstrap)
            with running_tasks(workdir, bootstrap, topology, app_id, PARTITIONS) as run:
                us = cpu_us_per_record(run, records, params.commit_every)
                stored, stored_bytes = _buffered(run)
            if rep >= 0:
                cpu[window_s].append(us)
                found[window_s] = (_output_end(bootstrap) - before, stored, stored_bytes)
    windows = []
    for window_s in params.windows_s:
        retention_ms = (2 * window_s + params.grace_s) * 1000
        obliged = sum(1 for msg in records if msg.timestamp()[1] >= last_ms - retention_ms)
        outputs, stored, stored_bytes = found[window_s]
        windows.append(Window(window_s, cpu[window_s], outputs, stored, stored_bytes, obliged))
    return windows


def _output_end(bootstrap: str) -> int:
    """The output topic's records so far (its partitions' end offsets, summed)."""
    consumer = raw_consumer(bootstrap, new_application_id("bench-join-windows-ends"))
    try:
        ends = (
            consumer.get_watermark_offsets(ck.TopicPartition(OUTPUT, p), timeout=10)
            for p in range(PARTITIONS)
        )
        return sum(high for _low, high in ends)
    finally:
        consumer.close()


def _buffered(run: RunningTasks) -> tuple[int, int]:
    """(entries, bytes of keys and values) both join buffers of every task hold."""
    left, right, _parked = store_names(f"{JOIN}-join")
    entries = size = 0
    for task in run.parts.tasks.running_actives():
        for name in (left, right):
            for key, value in task.stores[name].iter_committed():
                entries += 1
                size += len(key) + len(value)
    return entries, size


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    result = Result(NAME, TITLE)
    smallest = measured.windows[0]
    base_rate = 1e6 / min(smallest.cpu_us)
    for window in measured.windows:
        label = f"window ±{window.window_s} s"
        if window is not smallest:
            result.rows.append(
                Row(f"records/s, {label}", 1e6 / min(window.cpu_us), label, base_rate,
                    f"window ±{smallest.window_s} s", "records/s")
            )  # fmt: skip
        result.rows.append(
            Row(f"join buffer entries at the end, {label}", window.stored, "entries held",
                window.obliged, "records within the retention", "entries")
        )  # fmt: skip
    result.facts = {
        "records": params.records,
        "keys": params.keys,
        "rate": params.rate,
        "grace_s": params.grace_s,
        "partitions": PARTITIONS,
        "reps": params.reps,
        "commit_every": params.commit_every,
    }
    result.details.append(
        table(
            ["window (before = after)", "records/s (best)", "us per record, each run",
             "joined records", "per input record", "buffer entries", "buffer KiB",
             "records within retention"],
            [
                [f"±{w.window_s} s", f"{1e6 / min(w.cpu_us):,.0f}",
                 ", ".join(f"{v:.2f}" for v in w.cpu_us), f"{w.outputs:,}",
                 f"{w.outputs / (2 * params.records):.2f}", f"{w.stored:,}",
                 f"{w.stored_bytes / 1024:,.0f}", f"{w.obliged:,}"]
                for w in measured.windows
            ],
        )
    )  # fmt: skip
    return result
