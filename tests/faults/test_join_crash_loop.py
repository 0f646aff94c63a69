"""A windowed left join SIGKILLed at random moments under exactly-once: every order gets
exactly one result, ``[order, shipment]`` when it shipped in its window and
``[order, None]`` when it did not: none lost, none twice, no unmatched result for an
order that shipped (the join's buffers and parked results roll back with the
transaction and are restored from their changelogs)."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.join_app import AFTER_MS, GRACE_MS, ORDERS, RESULTS, SHIPMENTS
from tests.support.transaction_log import read_committed_topic
from tests.support.waiting import wait_until
from worker.config import load
from worker.kafka.loader import produce_records
from worker.partitioner import partition_for
from worker.serde import JSON, STR

pytestmark = pytest.mark.faults

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
PARTITIONS = 4
KILLS = 6
ROUND = 600
SEED = 20261127
BASE_MS = 1_700_000_000_000


def _results(bootstrap: str) -> list[list[object]]:
    records = read_committed_topic(bootstrap, RESULTS, PARTITIONS)
    return [orjson.loads(r.value) for _, r in records if r.value]


def _produce_round(settings, first: int, rng: random.Random) -> set[int]:
    """Orders ``first..first+ROUND-1``, each 10 ms after the last; two in three ship
    within the window. Returns the ids that shipped."""
    orders = [(f"o{i}", {"order": i}) for i in range(first, first + ROUND)]
    times = [BASE_MS + 10 * i for i in range(first, first + ROUND)]
    shipped = {i for i in range(first, first + ROUND) if rng.random() < 2 / 3}
    ships = [(f"o{i}", {"ship": i}) for i in sorted(shipped)]
    ship_times = [BASE_MS + 10 * i + rng.randint(0, AFTER_MS) for i in sorted(shipped)]
    produce_records(settings, ORDERS, orders, STR, JSON, timestamps=times)
    produce_records(settings, SHIPMENTS, ships, STR, JSON, timestamps=ship_times)
    return shipped


def _close_every_window(settings, last: int) -> None:
    """An order on every partition far past every window (plus grace): each task's
    stream time moves on, and the parked unmatched results leave."""
    ticks: dict[int, str] = {}
    n = 0
    while len(ticks) < PARTITIONS:
        key = f"tick{n}"
        ticks.setdefault(partition_for(key.encode(), PARTITIONS), key)
        n += 1
    late = BASE_MS + 10 * last + AFTER_MS + GRACE_MS + 1_000
    produce_records(
        settings,
        ORDERS,
        [(key, {"tick": True}) for key in ticks.values()],
        STR,
        JSON,
        timestamps=[late] * PARTITIONS,
    )


@pytest.mark.duration(60)
def test_a_windowed_left_join_gives_exactly_one_result_per_order_through_random_kills(
    own_broker, worker_factory
):
    rng = random.Random(SEED)
    bootstrap = own_broker.bootstrap
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, PARTITIONS, 1) for t in (ORDERS, SHIPMENTS, RESULTS)]
    for future in admin.create_topics(topics).values():
        future.result(30)
    worker = worker_factory(
        "join",
        settings={
            "bootstrap.servers": bootstrap,
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 300,
        },
        args=["--app", "tests.integration.join_app:build"],
        env={"PYTHONPATH": REPO},
    )
    worker.wait_ready(90)
    shipped: set[int] = set()
    for kill in range(KILLS):
        shipped |= _produce_round(settings, kill * ROUND, rng)
        wait_until(
            lambda: worker.metric("worker_processed_records_total") > 0,
            60,
            message=f"kill {kill}: processing",
        )
        time.sleep(rng.uniform(0.05, 0.6))  # a random moment mid-processing
        assert worker.kill() == -9, f"kill {kill} (seed {SEED})"
        worker.start()
        worker.wait_ready(120)
    orders = KILLS * ROUND
    _close_every_window(settings, orders)

    def complete() -> bool:
        return len(_results(bootstrap)) >= orders

    wait_until(complete, 120, message=f"a result for each of {orders} orders (seed {SEED})")
    results = [r for r in _results(bootstrap) if "tick" not in r[0]]  # type: ignore[operator]
    per_order = Counter(r[0]["order"] for r in results)  # type: ignore[index]
    assert len(results) == orders and set(per_order) == set(range(orders)), f"seed {SEED}"
    assert max(per_order.values()) == 1, f"an order joined twice (seed {SEED})"
    for order, shipment in results:
        i = order["order"]  # type: ignore[index]
        expected = {"ship": i} if i in shipped else None
        assert shipment == expected, f"order {i}: {shipment} (seed {SEED})"
    assert worker.terminate() == 0
