"""Small topologies the benchmarks run with ``worker start --app benchmarks.apps:NAME``."""

from __future__ import annotations

from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.processing.topology import ProcessorFn
from worker.processing.windows import tumbling
from worker.serde import BYTES, JSON, STR
from worker.windowed_serde import WindowedSerde

MEMORY_TOPIC = "memory-input"
MEMORY_STORE = "blobs"


def keep_latest(ctx: ProcessorContext, key: bytes, value: bytes) -> None:
    ctx.store(MEMORY_STORE).put(key, value)


def memory_app() -> Topology:
    """One store per task holding the latest value of every key: state grows with input."""
    return (
        Topology()
        .add_source("blobs-in", MEMORY_TOPIC, key_serde=BYTES, value_serde=BYTES)
        .add_store(MEMORY_STORE, key_serde=BYTES, value_serde=BYTES)
        .add_processor("keep", keep_latest, parents=["blobs-in"], stores=[MEMORY_STORE])
    )


SUMS_INPUT = "amounts"
SUMS_OUTPUT = "amount-totals"
SUMS_STORE = "totals"


def count_and_sum(ctx: ProcessorContext, key: str, value: dict[str, Any]) -> None:
    """Count and sum the amounts per key; forward the new totals (one output per input)."""
    totals = ctx.store(SUMS_STORE)
    current = totals.get(key)
    amount = value["amount"]
    if current is None:
        current = {"count": 1, "sum": amount}
    else:
        current = {"count": current["count"] + 1, "sum": current["sum"] + amount}
    totals.put(key, current)
    ctx.forward(key, current)


def count_and_sum_app() -> Topology:
    """The issue 14 workload, as a user would write it against the public topology API."""
    return store_and_forward(SUMS_INPUT, SUMS_STORE, "sum", count_and_sum, SUMS_OUTPUT)


def store_and_forward(
    source: str, store: str, name: str, processor: ProcessorFn, sink: str
) -> Topology:
    """``source`` -> ``processor`` (node ``name``) over one key-value ``store`` -> ``sink``,
    string keys and JSON values: a per-key workload written by hand."""
    return (
        Topology()
        .add_source(f"{source}-in", source, key_serde=STR, value_serde=JSON)
        .add_store(store, key_serde=STR, value_serde=JSON)
        .add_processor(name, processor, parents=[f"{source}-in"], stores=[store])
        .add_sink(f"{sink}-out", sink, parents=[name], key_serde=STR, value_serde=JSON)
    )


WINDOWED_OUTPUT = "amount-minutes"
WINDOWED_STORE = "per-minute"  # the aggregation and its store
WINDOW_GRACE_MS = 10_000
HOURLY_RETENTION_MS = 3_600_000


def add_amount(key: str, value: dict[str, Any], totals: dict[str, int]) -> dict[str, int]:
    return {"count": totals["count"] + 1, "sum": totals["sum"] + value["amount"]}


def _per_minute(emit: str, retention_ms: int | None = None) -> Topology:
    return (
        Topology()
        .add_source("amounts-in", SUMS_INPUT, key_serde=STR, value_serde=JSON)
        .add_windowed_aggregation(
            WINDOWED_STORE,
            ["amounts-in"],
            tumbling(60_000, grace_ms=WINDOW_GRACE_MS, retention_ms=retention_ms),
            initializer=lambda: {"count": 0, "sum": 0},
            aggregator=add_amount,
            emit=emit,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_sink("minutes-out", WINDOWED_OUTPUT, [WINDOWED_STORE], WindowedSerde(STR), JSON)
    )


def windowed_count_and_sum_app() -> Topology:
    """Issue 22's workload: count and sum per key per tumbling minute of event time, every
    update forwarded (one store read, one write and one output per record, as
    :func:`count_and_sum_app`)."""
    return _per_minute("update")


def windowed_final_app() -> Topology:
    """The same count and sum, each minute's result forwarded once, when it closes."""
    return _per_minute("final")


def windowed_hourly_app() -> Topology:
    """The same count and sum on update, its windows kept for an hour (retention)."""
    return _per_minute("update", retention_ms=HOURLY_RETENTION_MS)


TTL_TOPIC = "ttl-input"
TTL_STORE = "recent"
TTL_MS = 2000


def keep_recent(ctx: ProcessorContext, key: bytes, value: bytes) -> None:
    ctx.store(TTL_STORE).put(key, value)


def ttl_app() -> Topology:
    """The latest value of each key for ``TTL_MS`` of stream time: under a churn of
    distinct keys the store holds the last ``TTL_MS`` of them, whatever the total."""
    return (
        Topology()
        .add_source("ttl-in", TTL_TOPIC, key_serde=BYTES, value_serde=BYTES)
        .add_store(TTL_STORE, key_serde=BYTES, value_serde=BYTES, ttl_ms=TTL_MS)
        .add_processor("keep", keep_recent, parents=["ttl-in"], stores=[TTL_STORE])
    )
