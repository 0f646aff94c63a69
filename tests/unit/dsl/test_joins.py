"""Joins in the DSL, run by the test driver over real tasks and stores: stream-table
(latest, as of a versioned table's time, a global table by key mapper), stream-stream
in windows, table-table; a re-keyed side repartitioned first, over 1 and N partitions
(docs/joins.md; the operators' own property tests are tests/property/test_join_*.py)."""

from __future__ import annotations

from typing import Any

import pytest

from worker.dsl import JoinWindows, StreamsBuilder
from worker.errors import TopologyError
from worker.processing.internal_topics import plan_internal_topics
from worker.testing import TopologyTestDriver


def pair(a: Any, b: Any) -> Any:
    return [a, b]


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_re_keyed_stream_is_repartitioned_before_it_joins_a_table(partitions: int) -> None:
    b = StreamsBuilder()
    profiles = b.table("profiles", name="profiles")
    payments = b.stream("payments").select_key(lambda k, v: v["account"])
    payments.left_join(profiles, pair, name="enrich").to("enriched")
    built = b.build("app")
    assert [r.topic for r in built.repartition_topics] == ["app-enrich-repartition"]
    with TopologyTestDriver(b, {"application.id": "app"}, partitions=partitions) as d:
        d.input_topic("profiles").pipe("acct-1", {"name": "Ada"}, timestamp=1)
        pays = d.input_topic("payments")
        pays.pipe("p1", {"account": "acct-1"}, timestamp=2)
        pays.pipe("p2", {"account": "acct-2"}, timestamp=3)
        assert sorted(d.output_topic("enriched").read_key_values(), key=str) == [
            ("acct-1", [{"account": "acct-1"}, {"name": "Ada"}]),
            ("acct-2", [{"account": "acct-2"}, None]),
        ]


def test_a_stream_joins_a_versioned_table_as_of_its_records_time() -> None:
    b = StreamsBuilder()
    profiles = b.table("profiles", name="profiles", history_ms=3_600_000)
    b.stream("payments").join(profiles, pair).to("enriched")
    with TopologyTestDriver(b) as d:
        table = d.input_topic("profiles")
        table.pipe("a", "v1", timestamp=100)
        table.pipe("a", "v2", timestamp=200)
        pays = d.input_topic("payments")
        for ts in (50, 150, 250):
            pays.pipe("a", ts, timestamp=ts)
        assert d.output_topic("enriched").read_key_values() == [
            ("a", [150, "v1"]),
            ("a", [250, "v2"]),
        ]


def test_a_stream_joins_a_global_table_by_a_key_mapper_over_any_partition() -> None:
    b = StreamsBuilder()
    merchants = b.global_table("merchants", name="merchants")
    b.stream("payments").left_join(merchants, pair, key_mapper=lambda k, v: v["merchant"]).to(
        "enriched"
    )
    with TopologyTestDriver(b, partitions=3) as d:
        d.input_topic("merchants").pipe("m1", "Shop", timestamp=1)
        pays = d.input_topic("payments")
        pays.pipe("p1", {"merchant": "m1"}, timestamp=2)
        pays.pipe("p2", {"merchant": "m9"}, timestamp=3)
        assert sorted(d.output_topic("enriched").read_key_values(), key=str) == [
            ("p1", [{"merchant": "m1"}, "Shop"]),
            ("p2", [{"merchant": "m9"}, None]),
        ]


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_windowed_left_join_emits_the_unmatched_order_once_its_window_closed(
    partitions: int,
) -> None:
    b = StreamsBuilder()
    ships = b.stream("shipments")
    windows = JoinWindows(before_ms=0, after_ms=1_000, grace_ms=0)
    b.stream("orders").left_join(ships, pair, windows).to("status")
    with TopologyTestDriver(b, partitions=partitions) as d:
        orders, shipments = d.input_topic("orders"), d.input_topic("shipments")
        orders.pipe("o1", "order-1", timestamp=0)
        orders.pipe("o2", "order-2", timestamp=0)
        shipments.pipe("o1", "ship-1", timestamp=500)
        status = d.output_topic("status")
        assert status.read_key_values() == [("o1", ["order-1", "ship-1"])]
        for key in ("o1", "o2", "o3", "o4", "o5", "o6"):  # every partition's time moves on
            orders.pipe(key, "later", timestamp=5_000)
        assert status.read_key_values() == [("o2", ["order-2", None])]  # once, when closed


def test_table_table_outer_join_is_a_queryable_table_whose_deletes_propagate() -> None:
    b = StreamsBuilder()
    limits = b.table("limits", name="limits")
    profiles = b.table("profiles", name="profiles").filter(lambda k, v: v != "hidden")
    limits.outer_join(profiles, pair, name="accounts").to_stream().to("accounts")
    with TopologyTestDriver(b) as d:
        d.input_topic("limits").pipe("a", 100, timestamp=1)
        d.input_topic("profiles").pipe("a", "Ada", timestamp=2)
        d.input_topic("limits").pipe("a", None, timestamp=3)
        d.input_topic("profiles").pipe("a", "hidden", timestamp=4)
        assert d.output_topic("accounts").read_key_values() == [
            ("a", [100, None]),
            ("a", [100, "Ada"]),
            ("a", [None, "Ada"]),
            ("a", None),
        ]


def test_a_stream_stream_join_without_windows_is_refused() -> None:
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match="JoinWindows"):
        b.stream("a").join(b.stream("b"), pair)


def test_join_inputs_of_unequal_partition_counts_are_refused_naming_both_topics() -> None:
    b = StreamsBuilder()
    b.stream("payments").join(b.table("profiles", name="profiles"), pair).to("out")
    built = b.build("app").build()
    with pytest.raises(TopologyError, match="payments=4, profiles=2|profiles=2, payments=4"):
        plan_internal_topics(built, "app", {"payments": 4, "profiles": 2})


def test_a_global_table_join_needs_no_co_partitioning() -> None:
    b = StreamsBuilder()
    merchants = b.global_table("merchants", name="merchants")
    b.stream("payments").join(merchants, pair, key_mapper=lambda k, v: v).to("out")
    built = b.build("app").build()
    plan = plan_internal_topics(built, "app", {"payments": 4, "merchants": 3})
    assert plan.tasks == {0: 4}
