"""Tables: source, filter, map_values, to_stream, and re-grouping with adder and
subtractor (Kafka Streams' KTable semantics, reference dsl-and-joins.md §2.3 and §7)."""

from __future__ import annotations

from typing import Any

from worker.dsl import StreamsBuilder
from worker.operators.change import Change, ChangeSerde
from worker.serde import JSON
from worker.testing import TopologyTestDriver


def test_a_table_keeps_the_latest_row_and_a_tombstone_deletes_it() -> None:
    b = StreamsBuilder()
    b.table("rows", name="rows")
    with TopologyTestDriver(b) as d:
        rows = d.input_topic("rows")
        rows.pipe("a", 1, timestamp=1)
        rows.pipe("b", 2, timestamp=2)
        rows.pipe("a", 3, timestamp=3)
        rows.pipe("b", None, timestamp=4)
        assert d.store("rows").all() == {"a": 3}


def test_table_filter_turns_a_row_that_stops_passing_into_a_tombstone() -> None:
    b = StreamsBuilder()
    table = b.table("rows", name="rows")
    table.filter(lambda k, v: v > 10).map_values(lambda v: v * 2).to_stream().to("out")
    with TopologyTestDriver(b) as d:
        rows = d.input_topic("rows")
        for i, (key, value) in enumerate([("a", 20), ("a", 5), ("b", 1), ("c", None)]):
            rows.pipe(key, value, timestamp=i)
        assert d.output_topic("out").read_key_values() == [
            ("a", 40),
            ("a", None),
            ("b", None),
            ("c", None),
        ]


def regrouped_sums(partitions: int = 1) -> tuple[TopologyTestDriver, Any]:
    """Users (key: user, value: {"region", "score"}) summed per region."""
    b = StreamsBuilder()
    sums = (
        b.table("users", name="users")
        .group_by(lambda k, v: (v["region"], v["score"]), name="by-region")
        .aggregate(
            lambda: 0,
            lambda key, value, agg: agg + value,
            lambda key, value, agg: agg - value,
            name="region-sums",
        )
    )
    sums.to_stream().to("out")
    driver = TopologyTestDriver(b, partitions=partitions)
    return driver, driver.input_topic("users")


def test_a_regrouped_table_adds_inserts_moves_updates_and_subtracts_deletes() -> None:
    driver, users = regrouped_sums()
    with driver as d:
        out = d.output_topic("out")
        users.pipe("ann", {"region": "eu", "score": 5}, timestamp=1)
        assert out.read_key_values() == [("eu", 5)]
        users.pipe("bob", {"region": "eu", "score": 2}, timestamp=2)
        assert out.read_key_values() == [("eu", 7)]
        # an update within the group: subtract and add in one step, one output
        users.pipe("ann", {"region": "eu", "score": 6}, timestamp=3)
        assert out.read_key_values() == [("eu", 8)]
        # a move: out of the old group, into the new one
        users.pipe("bob", {"region": "us", "score": 2}, timestamp=4)
        assert out.read_key_values() == [("eu", 6), ("us", 2)]
        # a delete subtracts
        users.pipe("ann", None, timestamp=5)
        assert out.read_key_values() == [("eu", 0)]
        assert d.store("region-sums").all() == {"eu": 0, "us": 2}


def test_regrouping_gives_the_same_sums_over_several_partitions() -> None:
    driver, users = regrouped_sums(partitions=3)
    with driver as d:
        for i in range(20):
            users.pipe(f"u{i % 7}", {"region": f"r{i % 3}", "score": i}, timestamp=i)
        expected: dict[str, int] = {}
        latest = {f"u{i % 7}": (f"r{i % 3}", i) for i in range(20)}
        for region, score in latest.values():
            expected[region] = expected.get(region, 0) + score
        assert {k: v for k, v in d.store("region-sums").all().items() if v} == expected


def test_a_subtractor_returning_none_removes_the_row_and_the_initializer_runs_again() -> None:
    b = StreamsBuilder()
    b.table("t", name="t").group_by(lambda k, v: (v, k), name="g").reduce(
        lambda agg, v: f"{agg}+{v}",
        lambda agg, v: None,
        name="joined",
    ).to_stream().to("out")
    with TopologyTestDriver(b) as d:
        t = d.input_topic("t")
        t.pipe("a", "x", timestamp=1)
        t.pipe("b", "x", timestamp=2)
        t.pipe("a", None, timestamp=3)
        t.pipe("c", "x", timestamp=4)
        assert d.output_topic("out").read_key_values() == [
            ("x", "a"),
            ("x", "a+b"),
            ("x", None),
            ("x", "c"),
        ]
        assert d.store("joined").all() == {"x": "c"}


def test_table_count_counts_rows_per_group() -> None:
    b = StreamsBuilder()
    b.table("t", name="t").group_by(lambda k, v: (v, v), name="g").count(name="n")
    with TopologyTestDriver(b) as d:
        t = d.input_topic("t")
        for i, (k, v) in enumerate([("a", "x"), ("b", "x"), ("a", "y"), ("b", None)]):
            t.pipe(k, v, timestamp=i)
        assert d.store("n").all() == {"x": 0, "y": 1}


def test_a_change_round_trips_through_its_serde() -> None:
    serde = ChangeSerde(JSON)
    for change in (Change(1, 2), Change(None, {"a": 1}), Change("x", None), Change(None, None)):
        assert serde.deserialize(serde.serialize(change)) == change
