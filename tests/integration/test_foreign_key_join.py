"""The foreign-key table-table join through a real worker process on the broker: orders
(3 partitions) left-joined with customers (2 partitions) by the order's customer field,
through the subscription and response topics the worker creates at start (sized as the
customers and the orders). Orders arrive before their customers, move between customers
and are deleted; customers change and are deleted. The result table, read through the
HTTP query API, and the last change per order on the output topic both end equal to the
join of the final tables, computed here in plain Python.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fk_join_app import RESULT, TOPICS_ENV
from tests.support.kafka_io import produce_raw, read_partition
from tests.support.killing import stored
from tests.support.waiting import wait_until
from worker.config import load
from worker.kafka.admin import Admin
from worker.kafka.topics import TopicSpec

# On both brokers: the internal topics are created by the worker on each.
pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu", "kafka")]

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
ORDERS, CUSTOMERS = 30, 6


def records(rows: list[tuple[str, Any]]) -> list[tuple[bytes | None, bytes | None]]:
    return [(k.encode(), None if v is None else json.dumps(v).encode()) for k, v in rows]


def reference(orders: dict[str, Any], customers: dict[str, Any]) -> dict[str, Any]:
    return {pk: [order, customers.get(order["customer"])] for pk, order in orders.items()}


def last_changes(bootstrap: str, topic: str) -> dict[str, Any]:
    last: dict[str, Any] = {}
    for partition in range(3):
        for _offset, key, value in read_partition(bootstrap, topic, partition):
            assert key is not None
            last[key.decode()] = None if value is None else json.loads(value)
    return {k: v for k, v in last.items() if v is not None}


@pytest.mark.duration(40)
def test_a_foreign_key_join_keeps_its_result_table_equal_to_the_join_of_the_tables(
    bootstrap, worker_factory
):
    suffix = uuid.uuid4().hex[:8]
    orders_t, customers_t, out = f"orders-{suffix}", f"customers-{suffix}", f"fk-out-{suffix}"
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    admin = Admin(settings)
    admin.create_topics([TopicSpec(orders_t, 3), TopicSpec(customers_t, 2), TopicSpec(out, 3)])
    orders = {f"o{i}": {"customer": f"c{i % CUSTOMERS}", "n": i} for i in range(ORDERS)}
    keys = list(orders)  # deleted ones included: they must leave the result
    customers = {f"c{i}": {"name": f"name-{i}"} for i in range(CUSTOMERS)}
    produce_raw(bootstrap, orders_t, records(list(orders.items())))  # before their customers
    env = {TOPICS_ENV: f"{orders_t},{customers_t},{out}", "PYTHONPATH": REPO}
    worker = worker_factory(
        "fk",
        settings={"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 200},
        args=["--app", "tests.integration.fk_join_app:build"],
        env=env,
    )
    worker.wait_ready(60)
    produce_raw(bootstrap, customers_t, records(list(customers.items())))

    def settled() -> bool:
        expected = reference(orders, customers)
        return all(stored(worker, RESULT, pk) == expected.get(pk) for pk in keys)

    wait_until(settled, 60, message="every order joined with its customer")

    moves = [(f"o{i}", {"customer": f"c{(i + 1) % CUSTOMERS}", "n": i}) for i in range(0, 30, 4)]
    moves += [("o5", {"customer": "c-missing", "n": 5}), ("o7", None), ("o11", None)]
    changed = [("c1", {"name": "renamed"}), ("c2", None)]
    produce_raw(bootstrap, orders_t, records(moves))
    produce_raw(bootstrap, customers_t, records(changed))
    for pk, order in moves:
        if order is None:
            orders.pop(pk)
        else:
            orders[pk] = order
    customers["c1"] = {"name": "renamed"}
    customers.pop("c2")
    wait_until(settled, 60, message="the moved and deleted orders and customers joined")

    expected = reference(orders, customers)
    wait_until(lambda: last_changes(bootstrap, out) == expected, 30, message="the output topic")
    app = worker_factory.application_id
    internal = [
        f"{app}-orders-with-customers-{kind}-repartition" for kind in ("subscription", "response")
    ]
    counts = admin.partition_counts(internal)
    assert [counts[t] for t in internal] == [2, 3], counts  # as the customers, as the orders
    assert worker.terminate(30) == 0
