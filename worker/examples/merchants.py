"""The DSL example app: payments re-keyed by merchant and counted per merchant in 10-minute
windows (``worker start --app worker.examples.merchants:build``; docs/dsl.md).

It reads the example's ``payments`` topic (keyed by account, ``{"id", "account",
"merchant", "amount_cents"}``, the record's timestamp the payment's time) under an
application id of its own, so it runs beside the payments app (``make demo`` runs both).
``group_by`` the merchant goes through the repartition topic
``<application.id>-payments-by-merchant-repartition``, which the worker creates with the
partition count of ``payments``; the counts live in the windowed store
``merchant-10m`` (queryable over HTTP) and every update goes to ``merchant-counts``,
keyed by ``Windowed(merchant, start_ms, end_ms)`` (``WindowedSerde(STR)``): the last
record of a window is its count.

The grace is long (``GRACE_MS``): the records of one merchant come from every partition
of ``payments``, and one partition's task may lag the others (a restarted worker catching
up); a payment later than the grace behind the merchant task's stream time would be
dropped as late.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.dsl import StreamsBuilder, tumbling
from worker.serde import JSON, STR
from worker.windowed_serde import WindowedSerde

APPLICATION_ID = "merchants-app"
PAYMENTS = "payments"
MERCHANT_COUNTS = "merchant-counts"
STORE = "merchant-10m"
WINDOW_MS = 10 * 60_000
GRACE_MS = 12 * 3_600_000
KEYS = WindowedSerde(STR)


def build() -> StreamsBuilder:
    """The topology, as a builder: ``worker start`` builds it with its application id."""
    builder = StreamsBuilder()
    (
        builder.stream(PAYMENTS, key_serde=STR, value_serde=JSON)
        .group_by(lambda account, payment: payment["merchant"], name="payments-by-merchant")
        .windowed_by(tumbling(WINDOW_MS, grace_ms=GRACE_MS))
        .count(name=STORE)
        .to_stream()
        .to(MERCHANT_COUNTS, key_serde=KEYS, value_serde=JSON)
    )
    return builder


def reference(payments: Iterable[tuple[dict[str, Any], int]]) -> dict[tuple[str, int], int]:
    """(merchant, window start) -> payments, for ``(payment, time)`` pairs. Pure: the
    demo's and the tests' reference."""
    counts: dict[tuple[str, int], int] = {}
    for payment, at in payments:
        window = (payment["merchant"], at - at % WINDOW_MS)
        counts[window] = counts.get(window, 0) + 1
    return counts
