"""Table-table joins on real stores against a plain-Python reference.

Random updates and deletes of either table (plain, or versioned: out-of-order updates
ignored), restarts and restores from the changelogs, for inner, left and outer joins:
the result table's changes equal the reference's (a row whenever the result has one, a
tombstone only when a row existed), and the result store holds the reference's result
table.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.joining import Fed, joining
from worker.operators.joins.table_table import Kind, add_table_table_join, result_parents
from worker.operators.joins.tables import add_versioned_table, table_node
from worker.processing.topology import Topology
from worker.serde import JSON, STR

KEYS = st.sampled_from(["a", "b", "c"])
events = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["l", "r"]),
            KEYS,
            st.one_of(st.none(), st.integers(0, 9)),
            st.integers(0, 60),
        ),
        st.tuples(st.sampled_from(["restart", "restore"])),
    ),
    max_size=50,
)


def pair(left: Any, right: Any) -> Any:
    return [left, right]


def topology(kind: Kind, history: int | None) -> Topology:
    t = Topology()
    if history is None:
        t.add_table("L", "lt", STR, JSON).add_table("R", "rt", STR, JSON)
        left, right = ("L", "L"), ("R", "R")
    else:
        add_versioned_table(t, "L", "lt", history, key_serde=STR, value_serde=JSON)
        add_versioned_table(t, "R", "rt", history, key_serde=STR, value_serde=JSON)
        left, right = (table_node("L"), "L"), (table_node("R"), "R")
    add_table_table_join(t, "J", left, right, pair, kind=kind, key_serde=STR, value_serde=JSON)
    return t.add_sink("out", "out", result_parents("J"), STR, JSON)


class Reference:
    def __init__(self, kind: Kind, history: int | None) -> None:
        self.kind, self.history = kind, history
        self.observed = {"l": -1, "r": -1}
        self.newest: dict[tuple[str, str], int] = {}  # (side, key) -> time of its newest version
        self.rows: dict[str, dict[str, Any]] = {"l": {}, "r": {}}
        self.result: dict[str, Any] = {}
        self.out: list[tuple[Any, Any, int]] = []

    def update(self, side: str, key: str, value: Any, ts: int) -> None:
        if self.history is not None:  # versioned: only in-order changes reach the join
            if ts < self.observed[side] - self.history:
                return
            self.observed[side] = max(self.observed[side], ts)
            if ts < self.newest.get((side, key), -1):
                return
            self.newest[(side, key)] = ts
        if value is None:
            self.rows[side].pop(key, None)
        else:
            self.rows[side][key] = value
        left, right = self.rows["l"].get(key), self.rows["r"].get(key)
        has = {
            "inner": left is not None and right is not None,
            "left": left is not None,
            "outer": left is not None or right is not None,
        }[self.kind]
        if has:
            self.result[key] = [left, right]
            self.out.append((key, [left, right], ts))
        elif key in self.result:
            del self.result[key]
            self.out.append((key, None, ts))


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(["inner", "left", "outer"]),
    history=st.one_of(st.none(), st.integers(0, 30)),
    script=events,
)
def test_table_table_join_matches_the_reference(
    kind: Kind, history: int | None, script: list[Any]
) -> None:
    reference = Reference(kind, history)

    def fed(event: Any) -> Fed:
        side, key, value, ts = event
        reference.update(side, key, value, ts)
        return f"{side}t", key, value, ts

    with joining(topology(kind, history).build()) as running:
        running.play(script, fed)
        assert running.outputs("out") == reference.out
        running.commit()
        result = running.stores["J"]
        for key in ("a", "b", "c"):
            stored = result.get_committed(key.encode())
            assert (None if stored is None else JSON.deserialize(stored)) == reference.result.get(
                key
            )
