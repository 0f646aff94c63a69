"""The foreign-key table-table join in the DSL (KIP-213), run by the test driver over real
tasks and stores: foreign key changes, deletes on either side, left rows without a
foreign key, tables of unequal partition counts, the topology and its internal topics
(docs/joins.md; the interleavings: tests/property/test_join_foreign_key.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.kafka.test_internal_topics import FakeAdmin
from worker.dsl import StreamsBuilder
from worker.errors import TopologyError
from worker.kafka.topics import prepare_topics
from worker.operators.joins.foreign_key import FkKind
from worker.testing import TopologyTestDriver

SUBSCRIPTION = "app-J-subscription-repartition"
RESPONSE = "app-J-response-repartition"


def pair(a: Any, b: Any) -> Any:
    return [a, b]


def orders_with_customers(kind: FkKind) -> StreamsBuilder:
    b = StreamsBuilder()
    orders, customers = b.table("orders", name="orders"), b.table("customers", name="customers")
    join = orders.join if kind == "inner" else orders.left_join
    join(customers, lambda order: order["customer"], pair, name="J").to_stream().to("out")
    return b


def run(kind: FkKind, partitions: int, records: list[tuple[str, str, Any]]) -> tuple[list, dict]:
    """The join's outputs and final result store for ``records`` (topic, key, value)."""
    with TopologyTestDriver(
        orders_with_customers(kind), {"application.id": "app"}, partitions=partitions
    ) as d:
        for ts, (topic, key, value) in enumerate(records):
            d.input_topic(topic).pipe(key, value, timestamp=ts)
        return d.output_topic("out").read_key_values(), d.store("J-store").all()


O1, O2 = {"customer": "c1"}, {"customer": "c2"}
ADA, BOB = {"name": "Ada"}, {"name": "Bob"}


@pytest.mark.parametrize("partitions", [1, 3])
def test_an_order_follows_its_customer_through_a_foreign_key_change(partitions: int) -> None:
    out, store = run(
        "inner",
        partitions,
        [
            ("customers", "c1", ADA),
            ("customers", "c2", BOB),
            ("orders", "o1", O1),
            ("orders", "o1", O2),
            ("customers", "c1", {"name": "Ada 2"}),  # the old customer: nothing for o1
            ("customers", "c2", {"name": "Bob 2"}),
        ],
    )
    assert out == [("o1", [O1, ADA]), ("o1", [O2, BOB]), ("o1", [O2, {"name": "Bob 2"}])]
    assert store == {"o1": [O2, {"name": "Bob 2"}]}


def test_an_inner_join_retracts_a_row_whose_foreign_key_moves_to_a_missing_row() -> None:
    out, store = run(
        "inner", 2, [("customers", "c1", ADA), ("orders", "o1", O1), ("orders", "o1", O2)]
    )
    assert out == [("o1", [O1, ADA]), ("o1", None)]
    assert store == {}


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("inner", [("o1", [O1, ADA]), ("o1", None)]),
        ("left", [("o1", [O1, ADA]), ("o1", [O1, None])]),
    ],
)
def test_a_deleted_right_row_is_a_tombstone_or_a_left_row_with_none(
    kind: FkKind, expected: list
) -> None:
    out, _ = run(
        kind, 2, [("customers", "c1", ADA), ("orders", "o1", O1), ("customers", "c1", None)]
    )
    assert out == expected


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_a_deleted_left_row_is_one_tombstone_and_nothing_after(kind: FkKind) -> None:
    out, store = run(
        kind,
        2,
        [
            ("customers", "c1", ADA),
            ("orders", "o1", O1),
            ("orders", "o1", None),
            ("orders", "o1", None),
            ("customers", "c1", BOB),
        ],
    )
    assert out == [("o1", [O1, ADA]), ("o1", None)]
    assert store == {}


def test_a_left_row_without_a_foreign_key_joins_none_in_a_left_join_only() -> None:
    no_fk = {"customer": None}
    for kind, expected in (("left", [("o1", [no_fk, None])]), ("inner", [])):
        out, _ = run(kind, 1, [("customers", "c1", ADA), ("orders", "o1", no_fk)])  # type: ignore[arg-type]
        assert out == expected, kind


def test_a_left_join_answers_before_the_right_row_exists_and_again_when_it_comes() -> None:
    out, store = run("left", 3, [("orders", "o1", O1), ("customers", "c1", ADA)])
    assert out == [("o1", [O1, None]), ("o1", [O1, ADA])]
    assert store == {"o1": [O1, ADA]}


def test_every_subscriber_of_a_right_row_hears_its_change() -> None:
    out, _ = run(
        "inner",
        3,
        [("orders", f"o{i}", O1) for i in range(4)] + [("customers", "c1", ADA)],
    )
    assert sorted(out) == [(f"o{i}", [O1, ADA]) for i in range(4)]


def test_describe_shows_the_subscription_and_response_topics() -> None:
    text = orders_with_customers("left").describe("app")
    assert f"Sink: J-store-subscription-sink (topic: {SUBSCRIPTION}) (repartition)" in text
    assert f"(topics: [{SUBSCRIPTION}]) (repartition)" in text
    assert f"Sink: J-store-response-sink (topic: {RESPONSE}) (repartition)" in text
    assert f"(topics: [{RESPONSE}]) (repartition)" in text
    built = orders_with_customers("left").build("app")
    assert sorted(r.topic for r in built.repartition_topics) == [RESPONSE, SUBSCRIPTION]


def test_each_internal_topic_is_sized_as_the_table_its_reader_holds() -> None:
    admin = FakeAdmin({"orders": 4, "customers": 2, "out": 1})
    built = orders_with_customers("inner").build("app").build()
    layout = prepare_topics(admin, built, "app", create_internal=True)  # type: ignore[arg-type]
    assert admin.topics[SUBSCRIPTION] == 2  # keyed by customer: beside the customers
    assert admin.topics[RESPONSE] == 4  # keyed by order: beside the orders
    assert sorted(layout.partitions.values()) == [2, 4]


def test_a_foreign_key_join_needs_callables_and_has_no_outer_kind() -> None:
    b = StreamsBuilder()
    orders, customers = b.table("orders"), b.table("customers")
    with pytest.raises(TopologyError, match="foreign_key_extractor must be callable"):
        orders.join(customers, "customer", pair)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="joiner must be callable"):
        orders.left_join(customers, lambda v: v, 3)  # type: ignore[arg-type]


def test_versioned_tables_join_by_foreign_key_and_out_of_order_updates_stay_history() -> None:
    b = StreamsBuilder()
    orders = b.table("orders", name="orders", history_ms=1_000)
    customers = b.table("customers", name="customers", history_ms=1_000)
    orders.join(customers, lambda order: order["customer"], pair, name="J").to_stream().to("out")
    with TopologyTestDriver(b, {"application.id": "app"}, partitions=2) as d:
        out = d.output_topic("out")
        d.input_topic("customers").pipe("c1", ADA, timestamp=100)
        d.input_topic("orders").pipe("o1", O1, timestamp=100)
        d.input_topic("customers").pipe("c1", BOB, timestamp=50)  # older: history only
        d.input_topic("orders").pipe("o1", O2, timestamp=60)  # older: history only
        assert out.read_key_values() == [("o1", [O1, ADA])]
        d.input_topic("customers").pipe("c1", BOB, timestamp=200)
        assert out.read_key_values() == [("o1", [O1, BOB])]
        assert d.store("J-store").all() == {"o1": [O1, BOB]}
