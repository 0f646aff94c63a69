"""Small topologies the benchmarks run with ``worker start --app benchmarks.apps:NAME``."""

from __future__ import annotations

from worker.processing import ProcessorContext, Topology
from worker.serde import BYTES

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
