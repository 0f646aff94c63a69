"""The counting topology of ``worker.examples.counting`` with a processor that raises on demand.

An input value ``{"id": n, "poison": true}`` makes the processor raise after it wrote the
store and forwarded its output, so a failed attempt leaves partial work behind: the
processing exception handler tests check that none of it survives.
"""

from __future__ import annotations

from typing import Any

from worker.examples.counting import COUNTS, INPUTS, OUTPUTS
from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR


class PoisonedRecord(Exception):
    """What the processor raises for a poisoned input."""


def count_or_raise(ctx: ProcessorContext, key: str, value: dict[str, Any]) -> None:
    counts = ctx.store(COUNTS)
    n = (counts.get(key) or 0) + 1
    counts.put(key, n)
    ctx.forward(key, {"id": value["id"], "count": n})
    if value.get("poison"):
        raise PoisonedRecord(f"input {value['id']} is poisoned")


def build() -> Topology:
    return (
        Topology()
        .add_source("in", INPUTS, key_serde=STR, value_serde=JSON)
        .add_store(COUNTS, key_serde=STR, value_serde=JSON)
        .add_processor("count", count_or_raise, parents=["in"], stores=[COUNTS])
        .add_sink("out", OUTPUTS, parents=["count"], key_serde=STR, value_serde=JSON)
    )
