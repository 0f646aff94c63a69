"""Orders left-joined with their customers by foreign key (KIP-213), in the DSL.

Run with ``worker start --app tests.integration.fk_join_app:build`` and the topics in
``FK_JOIN_APP_TOPICS`` (``orders,customers,out``). Orders are JSON with a ``customer``
field naming a key of the customers table; the result table (store :data:`RESULT`,
queryable) holds ``[order, customer or None]`` per order, and its changes go to ``out``.
"""

from __future__ import annotations

import os
from typing import Any

from worker.dsl import StreamsBuilder

TOPICS_ENV = "FK_JOIN_APP_TOPICS"
JOIN = "orders-with-customers"
RESULT = f"{JOIN}-store"


def _customer(order: Any) -> Any:
    return order.get("customer")


def _pair(order: Any, customer: Any) -> Any:
    return [order, customer]


def build() -> StreamsBuilder:
    orders_topic, customers_topic, out = os.environ[TOPICS_ENV].split(",")
    b = StreamsBuilder()
    orders = b.table(orders_topic, name="orders")
    customers = b.table(customers_topic, name="customers")
    orders.left_join(customers, _customer, _pair, name=JOIN).to_stream().to(out)
    return b
