"""A foreign-key join SIGKILLed at random moments under exactly-once: orders left-joined
with their customers (tests/integration/fk_join_app.py), both tables changing, orders
moving between customers and deleted, customers deleted. After the kills, the result
table (read through the HTTP query API) and the last committed change per order both
equal the join of the final tables, and every committed output joins a value the order
had with a value its customer had: the subscription, foreign-key and result stores roll
back with each aborted transaction and are restored from their changelogs, and the
subscription and response topics are written in the same transactions."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.fk_join_app import RESULT, TOPICS_ENV
from tests.support.killing import kill_mid_processing, stored
from tests.support.transaction_log import read_committed_topic
from tests.support.waiting import wait_until
from worker.config import load
from worker.kafka.admin import Admin
from worker.kafka.loader import produce_records
from worker.kafka.topics import TopicSpec
from worker.serde import JSON, STR

pytestmark = pytest.mark.faults

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
ORDER_PARTITIONS, CUSTOMER_PARTITIONS = 4, 2
ORDERS, CUSTOMERS = 60, 12
ORDER_KEYS = [f"o{i}" for i in range(ORDERS)]
KILLS = 5
ROUND = 300
SEED = 20261128


class Tables:
    """What was produced: every value each key had, and each table's final rows."""

    def __init__(self) -> None:
        self.orders: dict[str, Any] = {}
        self.customers: dict[str, Any] = {}
        self.had: dict[str, list[Any]] = {}

    def change(self, table: dict[str, Any], key: str, value: Any) -> None:
        self.had.setdefault(key, [None]).append(value)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    def joined(self) -> dict[str, Any]:
        return {
            pk: [order, self.customers.get(order["customer"])] for pk, order in self.orders.items()
        }


def _produce_round(
    settings: Any, topics: tuple[str, str], n: int, rng: random.Random, tables: Tables
) -> None:
    orders, customers = [], []
    for i in range(ROUND):
        if rng.random() < 0.25:
            key = f"c{rng.randrange(CUSTOMERS)}"
            value = None if rng.random() < 0.1 else {"name": f"name-{n}-{i}"}
            customers.append((key, value))
            tables.change(tables.customers, key, value)
        else:
            key = f"o{rng.randrange(ORDERS)}"
            value = (
                None if rng.random() < 0.1 else {"customer": f"c{rng.randrange(CUSTOMERS)}", "n": i}
            )
            orders.append((key, value))
            tables.change(tables.orders, key, value)
    produce_records(settings, topics[0], orders, STR, JSON)
    produce_records(settings, topics[1], customers, STR, JSON)


@pytest.mark.duration(120)
@pytest.mark.parametrize("survivors", [0, 1])
def test_a_foreign_key_join_ends_as_the_join_of_its_tables_through_random_kills(
    own_broker, worker_factory, survivors: int
):
    """``survivors``: workers beside the one killed, which take its tasks over (restoring
    the join's stores from their changelogs) and hand them back."""
    rng = random.Random(SEED)
    bootstrap = own_broker.bootstrap
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    suffix = uuid.uuid4().hex[:8]
    orders_t, customers_t, out = f"orders-{suffix}", f"customers-{suffix}", f"fk-out-{suffix}"
    Admin(settings).create_topics(
        [
            TopicSpec(orders_t, ORDER_PARTITIONS),
            TopicSpec(customers_t, CUSTOMER_PARTITIONS),
            TopicSpec(out, ORDER_PARTITIONS),
        ]
    )
    workers = [
        worker_factory(
            f"fk-{n}",
            settings={
                "bootstrap.servers": bootstrap,
                "processing.guarantee": "exactly_once_v2",
                "commit.interval.ms": 300,
            },
            args=["--app", "tests.integration.fk_join_app:build"],
            env={"PYTHONPATH": REPO, TOPICS_ENV: f"{orders_t},{customers_t},{out}"},
        )
        for n in range(1 + survivors)
    ]
    for worker in workers:
        worker.wait_ready(90)
    worker = workers[0]
    tables = Tables()
    for kill in range(KILLS):
        _produce_round(settings, (orders_t, customers_t), kill, rng, tables)
        kill_mid_processing(worker, rng, f"kill {kill} (seed {SEED})")
    expected = tables.joined()

    def settled() -> bool:
        return all(stored(worker, RESULT, pk) == expected.get(pk) for pk in ORDER_KEYS)

    wait_until(settled, 120, message=f"the result table is the join (seed {SEED})")
    last: dict[str, Any] = {}
    for _partition, record in read_committed_topic(bootstrap, out, ORDER_PARTITIONS):
        pk = record.key.decode()  # type: ignore[union-attr]
        value = None if record.value is None else orjson.loads(record.value)
        if value is not None:
            order, customer = value
            assert order in tables.had[pk], f"{pk}: {order} never produced (seed {SEED})"
            assert customer in tables.had.get(order["customer"], [None]), (pk, value, SEED)
        last[pk] = value
    assert {pk: v for pk, v in last.items() if v is not None} == expected, f"seed {SEED}"
    for worker in workers:
        assert worker.terminate() == 0
