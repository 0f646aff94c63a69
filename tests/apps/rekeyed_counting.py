"""A DSL topology with one repartition hop and one output per input, so exactly-once
across the hop is checkable record by record (tests/faults/test_repartition_crash_loop.py).

``rk-inputs`` (key: an account, value: ``{"id": n, "group": g}``) -> ``group_by`` the
group (through ``<application.id>-by-group-repartition``) -> per group, the number of
inputs so far and the last input's id in store ``group-counts`` -> ``rk-outputs``
(key: the group, value: ``{"id": n, "count": c}``). Under exactly-once, read_committed,
the outputs hold each input id once and each group's counts are 1..n, each once.
"""

from __future__ import annotations

from typing import Any

from worker.dsl import StreamsBuilder

INPUTS = "rk-inputs"
OUTPUTS = "rk-outputs"
COUNTS = "group-counts"


def count(group: str, value: dict[str, Any], aggregate: dict[str, int]) -> dict[str, int]:
    return {"id": value["id"], "count": aggregate["count"] + 1}


def build() -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream(INPUTS)
        .group_by(lambda key, value: value["group"], name="by-group")
        .aggregate(lambda: {"id": -1, "count": 0}, count, name=COUNTS)
        .to_stream()
        .to(OUTPUTS)
    )
    return builder
