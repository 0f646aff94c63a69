"""Table-table joins reproduce Kafka Streams' documented KTable-KTable join table exactly
(dsl-api.html, "KTable-KTable Equi-Join", timestamps 1 to 15, tombstones included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.joining import Joining
from worker.operators.joins.table_table import Kind, add_table_table_join, result_parents
from worker.processing.topology import Topology
from worker.serde import JSON, STR

# (timestamp, side, value or None)
INPUT = [
    (1, "l", None),
    (2, "r", None),
    (3, "l", "A"),
    (4, "r", "a"),
    (5, "l", "B"),
    (6, "r", "b"),
    (7, "l", None),
    (8, "r", None),
    (9, "l", "C"),
    (10, "r", "c"),
    (11, "r", None),
    (12, "l", None),
    (13, "r", None),
    (14, "r", "d"),
    (15, "l", "D"),
]
T = None  # a tombstone row in the expected output
EXPECTED: dict[str, list[tuple[int, Any]]] = {
    "inner": [(4, ["A", "a"]), (5, ["B", "a"]), (6, ["B", "b"]), (7, T), (10, ["C", "c"]),
              (11, T), (15, ["D", "d"])],
    "left": [(3, ["A", None]), (4, ["A", "a"]), (5, ["B", "a"]), (6, ["B", "b"]), (7, T),
             (9, ["C", None]), (10, ["C", "c"]), (11, ["C", None]), (12, T), (15, ["D", "d"])],
    "outer": [(3, ["A", None]), (4, ["A", "a"]), (5, ["B", "a"]), (6, ["B", "b"]),
              (7, [None, "b"]), (8, T), (9, ["C", None]), (10, ["C", "c"]), (11, ["C", None]),
              (12, T), (14, [None, "d"]), (15, ["D", "d"])],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_the_documented_sequence_gives_the_documented_results(tmp_path: Path, kind: Kind) -> None:
    t = Topology().add_table("L", "lt", STR, JSON).add_table("R", "rt", STR, JSON)
    add_table_table_join(
        t, "J", ("L", "L"), ("R", "R"), lambda a, b: [a, b], kind=kind, key_serde=STR,
        value_serde=JSON,
    )  # fmt: skip
    join = Joining(t.add_sink("out", "out", result_parents("J"), STR, JSON).build(), tmp_path)
    try:
        for ts, side, value in INPUT:
            join.feed(f"{side}t", "k", value, ts)
        assert [(ts, value) for _key, value, ts in join.outputs("out")] == EXPECTED[kind]
    finally:
        join.close()
