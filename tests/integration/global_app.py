"""Payments enriched from a global table of merchants, by a key mapper (no co-partitioning).

Run with ``worker start --app tests.integration.global_app:build`` and the topics in
``GLOBAL_APP_TOPICS`` (``merchants,payments,enriched``). Payments are JSON with a
``merchant`` field; each comes out on ``enriched`` as ``[payment, merchant name or None]``.
"""

from __future__ import annotations

import os
from typing import Any

from worker.operators.joins.stream_table import add_stream_table_join
from worker.processing.topology import Topology
from worker.serde import JSON, STR

TOPICS_ENV = "GLOBAL_APP_TOPICS"


def _merchant(key: Any, payment: Any) -> Any:
    return payment.get("merchant")


def _enrich(payment: Any, merchant: Any) -> Any:
    return [payment, merchant]


def build() -> Topology:
    merchants, payments, enriched = os.environ[TOPICS_ENV].split(",")
    t = Topology().add_global_table("merchants", merchants, STR, STR)
    t.add_source("payments", payments, STR, JSON)
    add_stream_table_join(
        t, "enrich", "payments", "merchants", _enrich, left=True, key_mapper=_merchant
    )
    return t.add_sink("out", enriched, ["enrich"], STR, JSON)
