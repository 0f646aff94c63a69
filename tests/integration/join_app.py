"""Orders left-joined with their shipments in a window: one result per order.

Run with ``worker start --app tests.integration.join_app:build``. Orders and shipments
(topics :data:`ORDERS` and :data:`SHIPMENTS`, JSON values, keyed by order id) join when
the shipment is at most ``AFTER_MS`` after the order; each order gives exactly one result
on :data:`RESULTS`: ``[order, shipment]``, or ``[order, None]`` once its window has closed.
``GRACE_MS`` is wide so that the order in which the task reads the two topics does not
matter.
"""

from __future__ import annotations

from worker.operators.joins.stream_stream import add_stream_stream_join, result_parents
from worker.processing.join_windows import JoinWindows
from worker.processing.topology import Topology
from worker.serde import JSON, STR

ORDERS, SHIPMENTS, RESULTS = "join-orders", "join-shipments", "join-results"
AFTER_MS = 1_000
GRACE_MS = 600_000


def _pair(order: object, shipment: object) -> object:
    return [order, shipment]


def build() -> Topology:
    t = Topology().add_source("orders", ORDERS, STR, JSON)
    t.add_source("shipments", SHIPMENTS, STR, JSON)
    add_stream_stream_join(
        t,
        "shipped",
        "orders",
        "shipments",
        JoinWindows(before_ms=0, after_ms=AFTER_MS, grace_ms=GRACE_MS),
        _pair,
        kind="left",
        key_serde=STR,
        left_serde=JSON,
        right_serde=JSON,
    )
    return t.add_sink("out", RESULTS, result_parents("shipped"), STR, JSON)
