"""The windowed alert of the example app: accounts with too many payments in 10 minutes.

The payments example (``worker.examples.payments``, ``make demo``) includes it through
:func:`add_busy_alerts`; on its own it runs with
``worker start --app worker.examples.windowed:build``. Topics:

- ``payments`` (stream, keyed by account id): ``{"id", "account", "amount_cents"}``, the
  record timestamp being the payment's time (the example app's input);
- ``busy-accounts`` (output): for each 10-minute window (starting every 5 minutes, aligned
  on the epoch) in which an account made more than ``BUSY_PAYMENTS`` payments, one alert,
  sent once when the window closes (``GRACE_MS`` after its end, in stream time). Its key
  is ``Windowed(account, start_ms, end_ms)`` (``worker.windowed_serde.WindowedSerde``
  over the string key), its value ``{"account", "from", "to", "payments", "sum_cents"}``.

The aggregation's store ``busy-10m`` (changelog ``<application.id>-busy-10m-changelog``)
answers ``GET /stores/busy-10m/windows?key=<account>`` with the counts so far.
:func:`expected_alerts` is the reference computation the demo and the tests check the
output against.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.dsl import KStream, StreamsBuilder
from worker.processing import ProcessorContext
from worker.processing.windows import hopping
from worker.serde import JSON, STR
from worker.windowed_serde import Windowed, WindowedSerde

PAYMENTS = "payments"
BUSY_ACCOUNTS = "busy-accounts"
STORE = "busy-10m"
BUSY_PAYMENTS = 20
GRACE_MS = 30_000
WINDOWS = hopping(600_000, 300_000, grace_ms=GRACE_MS)


def add_payment(account: str, payment: dict[str, Any], totals: dict[str, int]) -> dict[str, int]:
    """A window's totals after one more payment. Pure: the reference uses it too."""
    return {
        "payments": totals["payments"] + 1,
        "sum_cents": totals["sum_cents"] + payment["amount_cents"],
    }


def alert_for(window: Windowed[str], totals: dict[str, int]) -> dict[str, Any] | None:
    """The alert a closed window raises, or None."""
    if totals["payments"] <= BUSY_PAYMENTS:
        return None
    return {
        "account": window.key,
        "from": window.start_ms,
        "to": window.end_ms,
        "payments": totals["payments"],
        "sum_cents": totals["sum_cents"],
    }


def alert_id(alert: dict[str, Any]) -> str:
    """A busy alert's identity: the account and its window's start."""
    return f"{alert['account']}@{alert['from']}"


def busy_alert(ctx: ProcessorContext, window: Windowed[str], totals: dict[str, int]) -> None:
    alert = alert_for(window, totals)
    if alert is not None:
        ctx.forward(window, alert)


def expected_alerts(
    payments: Iterable[tuple[int, dict[str, Any]]], stream_time_ms: int
) -> dict[Windowed[str], dict[str, Any]]:
    """The alerts of ``payments`` (``(timestamp, payment)``) once stream time reached
    ``stream_time_ms``, assuming no payment arrived more than ``GRACE_MS`` late (the
    operator drops those; a reference over several partitions cannot tell which)."""
    totals: dict[Windowed[str], dict[str, int]] = {}
    for ts, payment in payments:
        account = payment["account"]
        for bounds in WINDOWS.windows_for(ts):
            key = Windowed(account, bounds.start_ms, bounds.end_ms)
            current = totals.get(key, {"payments": 0, "sum_cents": 0})
            totals[key] = add_payment(account, payment, current)
    alerts = {}
    for window, window_totals in totals.items():
        closed = stream_time_ms > WINDOWS.close_time(WINDOWS.window_at(window.start_ms))
        alert = alert_for(window, window_totals) if closed else None
        if alert is not None:
            alerts[window] = alert
    return alerts


def add_busy_alerts(payments: KStream) -> None:
    """Count the ``payments`` per account in hopping 10-minute windows and alert the busy
    ones to ``busy-accounts``."""
    (
        payments.group_by_key()
        .windowed_by(WINDOWS)
        .aggregate(lambda: {"payments": 0, "sum_cents": 0}, add_payment, name=STORE, emit="final")
        .to_stream()
        .process(busy_alert, name="busy-alert")
        .to(BUSY_ACCOUNTS, name="busy", key_serde=WindowedSerde(STR), value_serde=JSON)
    )


def build() -> StreamsBuilder:
    """The windowed alert alone, over the payments."""
    builder = StreamsBuilder()
    add_busy_alerts(builder.stream(PAYMENTS, key_serde=STR, value_serde=JSON, name="payments"))
    return builder
