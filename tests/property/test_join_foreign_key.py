"""The foreign-key table-table join against a plain-Python reference, over the
interleavings a broker may produce.

Random updates and deletes of both tables, left rows whose foreign key changes (or
becomes None), on 1 to 3 partitions; every record of every topic the topology reads
(the two tables, the subscription and the response topics) is held and delivered in an
order hypothesis picks, each partition's records in their own order
(tests/support/interleaving.py), or, at random points, all of them in the order they were
written (a settled join, whose next changes then race). So subscriptions and right changes
race, answers from a row's old and new foreign key reach it in either order, and answers
to values it no longer holds arrive late.

Checked, for inner and left joins:
- every output is consistent when it is emitted: ``[left row now, a value the right row
  of its foreign key has held]`` (left join: or ``None`` for the right value when that
  row has been missing at some point, or the foreign key is None), and a tombstone only
  for a row that was in the result and may now be absent from it;
- once everything is delivered, the last output per key and the result store both equal
  the reference join of the final tables, and the right side holds exactly one
  subscription per left row with a foreign key, to that key (old ones were deleted).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.interleaving import InterleavingDriver
from worker.dsl import StreamsBuilder
from worker.operators.joins.foreign_key import FkKind
from worker.operators.joins.subscriptions import subscriber
from worker.serde import JSON, STR

PKS = ["a", "b", "c"]
FKS = ["x", "y", "z", "w"]  # "w" never gets a right row: rows move to a missing one

left_values = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"fk": st.one_of(st.none(), st.sampled_from(FKS)), "v": st.integers(0, 3)}
    ),
)
events = st.lists(
    st.one_of(
        st.tuples(st.just("l"), st.sampled_from(PKS), left_values),
        st.tuples(st.just("r"), st.sampled_from(FKS[:3]), st.sampled_from([None, 0, 1, 2])),
        st.tuples(st.just("deliver"), st.integers(0, 20)),
        st.tuples(st.just("settle")),  # everything held delivered, the driver's way
    ),
    min_size=8,
    max_size=60,
)


def pair(left: Any, right: Any) -> Any:
    return [left, right]


def foreign_key(value: Any) -> Any:
    return value["fk"]


def builder(kind: FkKind) -> StreamsBuilder:
    b = StreamsBuilder()
    left, right = b.table("lt", name="L"), b.table("rt", name="R")
    joined = (left.join if kind == "inner" else left.left_join)(right, foreign_key, pair, name="J")
    joined.to_stream().to("out")
    return b


def reference(kind: FkKind, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """The join of two tables, by the book."""
    result = {}
    for pk, value in left.items():
        r = None if value["fk"] is None else right.get(value["fk"])
        if r is not None or kind == "left":
            result[pk] = [value, r]
    return result


class Observer:
    """The tables as the topology has processed them, and the checks on each output."""

    def __init__(self, kind: FkKind) -> None:
        self.kind = kind
        self.left: dict[str, Any] = {}
        self.right: dict[str, Any] = {}
        self.held: dict[str, list[Any]] = {fk: [None] for fk in FKS}  # every value it had
        self.last: dict[str, Any] = {}

    def processed(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        if topic not in ("lt", "rt") or key is None:
            return
        k, v = STR.deserialize(key), JSON.deserialize(value)
        table = self.left if topic == "lt" else self.right
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
        if topic == "rt":
            self.held[k].append(v)

    def output(self, pk: str, value: Any) -> None:
        now = self.left.get(pk)
        fk = None if now is None else now["fk"]
        if value is None:
            assert self.last.get(pk) is not None, f"{pk}: a tombstone for a missing row"
            absent = now is None or (self.kind == "inner" and (fk is None or None in self.held[fk]))
            assert absent, f"{pk}: retracted while {now} joins {fk}"
        else:
            assert now is not None and value[0] == now, f"{pk}: {value} for left row {now}"
            if fk is None:
                assert self.kind == "left" and value[1] is None, (pk, value)
            else:
                assert value[1] in self.held[fk], f"{pk}: {value[1]} never held by {fk}"
                assert value[1] is not None or self.kind == "left", (pk, value)
        self.last[pk] = value


X0, W0 = {"fk": "x", "v": 0}, {"fk": "w", "v": 0}


@pytest.mark.duration(130)
@settings(max_examples=100, deadline=None)
# a settled row whose foreign key moves to a missing right row must leave an inner join
@example("inner", 1, [("r", "x", 0), ("l", "a", X0), ("settle",), ("l", "a", W0)], [])
# the row moves away and back before any answer: only the last value's answers count
@example("left", 2, [("r", "x", 0), ("l", "a", X0), ("l", "a", W0), ("l", "a", X0)], [3, 1, 2])
@given(
    kind=st.sampled_from(["inner", "left"]),
    partitions=st.integers(1, 3),
    script=events,
    finish=st.lists(st.integers(0, 20), max_size=40),
)
def test_the_foreign_key_join_matches_the_reference_in_any_interleaving(
    kind: FkKind, partitions: int, script: list[Any], finish: list[int]
) -> None:
    observer = Observer(kind)
    with InterleavingDriver(builder(kind), partitions=partitions) as driver:
        inputs = {"l": driver.input_topic("lt"), "r": driver.input_topic("rt")}
        out = driver.output_topic("out", STR, JSON)

        def deliver(choice: int) -> bool:
            record = driver.deliver(choice)
            if record is None:
                return False
            observer.processed(record.topic(), record.key(), record.value())
            for pk, value in out.read_key_values():
                observer.output(pk, value)
            return True

        for ts, event in enumerate(script):
            if event[0] == "deliver":
                deliver(event[1])
            elif event[0] == "settle":
                while deliver(0):
                    pass
            else:
                inputs[event[0]].pipe(event[1], event[2], timestamp=ts)
        for choice in finish:
            deliver(choice)
        while deliver(0):
            pass
        expected = reference(kind, observer.left, observer.right)
        assert {pk: v for pk, v in observer.last.items() if v is not None} == expected
        assert driver.store("J-store").all() == expected
        subscribed = {pk: value["fk"] for pk, value in observer.left.items() if value["fk"]}
        assert subscriptions(driver.store("J-store-subscriptions").all()) == subscribed


def subscriptions(stored: dict[bytes, bytes]) -> dict[str, str]:
    """The subscription store's rows as primary key -> foreign key."""
    found = {}
    for key in stored:
        pk = subscriber(key)
        found[STR.deserialize(pk)] = STR.deserialize(key[4 : len(key) - len(pk)])
    return found
