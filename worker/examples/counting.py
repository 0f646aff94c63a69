"""A topology with one output per input, so exactly-once is checkable record by record.

The integration and fault tests and the availability benchmark run it
(``--app worker.examples.counting:build``): a stall of a task shows as a silence of its
partition of ``outputs``, and a lost or repeated input as a missing or repeated id.

``inputs`` (key: str, value: {"id": n}) -> count per key in the ``counts`` store ->
``outputs`` (key, {"id": n, "count": c}). Under exactly-once, the outputs read with
read_committed hold each input id once, and the counts of one key are 1..n in order.
"""

from __future__ import annotations

from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR

INPUTS = "inputs"
OUTPUTS = "outputs"
COUNTS = "counts"


def count(ctx: ProcessorContext, key: str, value: dict[str, Any]) -> None:
    """Count the input under its key and forward its id with the new count."""
    counts = ctx.store(COUNTS)
    n = (counts.get(key) or 0) + 1
    counts.put(key, n)
    ctx.forward(key, {"id": value["id"], "count": n})


def build() -> Topology:
    """The topology: ``inputs`` -> ``count`` (with the ``counts`` store) -> ``outputs``."""
    return (
        Topology()
        .add_source("in", INPUTS, key_serde=STR, value_serde=JSON)
        .add_store(COUNTS, key_serde=STR, value_serde=JSON)
        .add_processor("count", count, parents=["in"], stores=[COUNTS])
        .add_sink("out", OUTPUTS, parents=["count"], key_serde=STR, value_serde=JSON)
    )
