"""The example app: totals per account, alerts on unusual payments, each account's payments
of the last hour, an alert when an account that was active goes quiet, and one when an
account makes too many payments in 10 minutes.

Topics:
- ``payments`` (stream, keyed by account id): ``{"id", "account", "amount_cents"}``; the
  record's timestamp is the payment's time (``ctx.timestamp``);
- ``account-profiles`` (compacted table, keyed by account id): the account's historical
  ``{"mean", "std", "n"}`` of amounts in cents. A Spark job computes it from history;
  ``worker dev sample-data`` loads a generated one;
- ``payment-alerts`` (output): a payment more than ``ALERT_Z`` standard deviations from
  its account's mean;
- ``quiet-accounts`` (output): an account whose last payment is ``QUIET_AFTER_MS`` of
  stream time old, once per last payment;
- ``busy-accounts`` (output): an account with more than ``windowed.BUSY_PAYMENTS``
  payments in a 10-minute window (hopping, a window every 5 minutes), once per window,
  when it closes (:mod:`worker.examples.windowed`: an emit-final windowed aggregation with
  its windowed store ``busy-10m``).

Stores, each backed by its changelog ``<application.id>-<store>-changelog``:
- ``account-totals``: ``{"count", "sum_cents", "last_payment_ms", "quiet_alerted"}`` per
  account;
- ``recent-payments``: ``"<account>|<time, 13 digits>|<payment id>" -> amount_cents``,
  with a TTL of an hour of stream time, so it holds exactly the last hour's payments. A
  prefix query answers "payments of this account in the last hour":
  ``GET /stores/recent-payments/prefix?prefix=acct-00001|``.

The stores and the profiles live in one sub-topology, so ``payments`` and
``account-profiles`` must be co-partitioned.

The quiet check is a stream-time punctuator, every ``QUIET_CHECK_MS``. An account is
quiet at a check boundary (a multiple of ``QUIET_CHECK_MS``) at least ``QUIET_AFTER_MS``
after its last payment; its alert names that last payment and the first such boundary,
so it is a fact of the records alone, whichever batch a punctuation ran after: when the
account paid again before a punctuation ran past that boundary (both in one batch), the
payment raises the alert. The "alerted" marker is in the account's totals, written with
the alert, so a replay or a move never alerts twice for one last payment.
"""

from __future__ import annotations

from typing import Any

from worker.examples import windowed
from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR

PAYMENTS = "payments"
PROFILES = "account-profiles"
ALERTS = "payment-alerts"
QUIET = "quiet-accounts"
BUSY = windowed.BUSY_ACCOUNTS
TOTALS = "account-totals"
RECENT = "recent-payments"
ALERT_Z = 4.0
MIN_HISTORY = 5
HOUR_MS = 3_600_000  # the window of ``recent-payments``, its TTL
QUIET_AFTER_MS = 20 * 60_000  # no payment for this long: the account went quiet
QUIET_CHECK_MS = 60_000  # the quiet check's stream-time interval


def alert_for(payment: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any] | None:
    """The alert a payment raises against a profile, or None. Pure: the tests' reference too."""
    if not profile or profile.get("n", 0) < MIN_HISTORY or profile.get("std", 0) <= 0:
        return None
    amount = payment["amount_cents"]
    z = (amount - profile["mean"]) / profile["std"]
    if abs(z) < ALERT_Z:
        return None
    return {
        "payment_id": payment["id"],
        "account": payment["account"],
        "amount_cents": amount,
        "mean": profile["mean"],
        "std": profile["std"],
        "z": round(z, 3),
    }


def next_totals(
    current: dict[str, Any] | None, payment: dict[str, Any], at_ms: int
) -> dict[str, Any]:
    """Totals after one more payment, made at ``at_ms``. Pure: the tests' reference too.

    A payment older than the last one (out of order) counts, and leaves the last payment
    and its quiet marker as they were.
    """
    current = current or {}
    last = current.get("last_payment_ms", -1)
    newer = at_ms >= last
    return {
        "count": current.get("count", 0) + 1,
        "sum_cents": current.get("sum_cents", 0) + payment["amount_cents"],
        "last_payment_ms": at_ms if newer else last,
        "quiet_alerted": False if newer else current.get("quiet_alerted", False),
    }


def quiet_at(last_payment_ms: int) -> int:
    """The first check boundary at least ``QUIET_AFTER_MS`` after a last payment."""
    due = last_payment_ms + QUIET_AFTER_MS
    return -(-due // QUIET_CHECK_MS) * QUIET_CHECK_MS


def quiet_alert(account: str, totals: dict[str, Any] | None, upto_ms: int) -> dict[str, Any] | None:
    """The quiet alert of an account whose check boundary is at or before ``upto_ms`` and
    that was not alerted for its last payment yet, or None. Pure: the tests' reference too."""
    if not totals or totals.get("quiet_alerted") or "last_payment_ms" not in totals:
        return None
    last = totals["last_payment_ms"]
    at = quiet_at(last)
    if at > upto_ms:
        return None
    return {"account": account, "last_payment_ms": last, "quiet_at_ms": at}


def recent_key(account: str, at_ms: int, payment_id: str) -> str:
    """The ``recent-payments`` key: an account's payments sort together, by time."""
    return f"{account}|{at_ms:013d}|{payment_id}"


def score_payment(ctx: ProcessorContext, account: str, payment: dict[str, Any]) -> None:
    at = ctx.timestamp
    totals = ctx.store(TOTALS)
    current = totals.get(account)
    quiet = quiet_alert(account, current, at)  # quiet past a boundary no punctuation saw
    if quiet is not None:
        ctx.forward(account, quiet, "quiet")
    totals.put(account, next_totals(current, payment, at))
    ctx.store(RECENT).put(recent_key(account, at, payment["id"]), payment["amount_cents"])
    alert = alert_for(payment, ctx.store(PROFILES).get(account))
    if alert is not None:
        ctx.forward(account, alert, "alerts")


def start_quiet_checks(ctx: ProcessorContext) -> None:
    ctx.schedule(QUIET_CHECK_MS, "stream", check_quiet)


def check_quiet(ctx: ProcessorContext, now_ms: int) -> None:
    """Alert each account that went quiet by ``now_ms``; mark it, with the alert, in its
    totals. Walks every account of the task: fine for thousands per task; a larger store
    would walk a bounded slice per run from a cursor key (docs/time.md §3)."""
    totals = ctx.store(TOTALS)
    with totals.range() as accounts:
        quiet = [
            (account, value, alert)
            for account, value in accounts
            if (alert := quiet_alert(account, value, now_ms)) is not None
        ]
    for account, value, alert in quiet:
        totals.put(account, {**value, "quiet_alerted": True})
        ctx.forward(account, alert, "quiet")


def build() -> Topology:
    """The topology ``worker start`` runs by default."""
    topology = (
        Topology()
        .add_source("payments", PAYMENTS, key_serde=STR, value_serde=JSON)
        .add_table(PROFILES, PROFILES, key_serde=STR, value_serde=JSON)
        .add_store(TOTALS, key_serde=STR, value_serde=JSON)
        .add_store(RECENT, key_serde=STR, value_serde=JSON, ttl_ms=HOUR_MS)
        .add_processor(
            "score",
            score_payment,
            parents=["payments"],
            stores=[TOTALS, RECENT, PROFILES],
            init=start_quiet_checks,
        )
        .add_sink("alerts", ALERTS, parents=["score"], key_serde=STR, value_serde=JSON)
        .add_sink("quiet", QUIET, parents=["score"], key_serde=STR, value_serde=JSON)
    )
    return windowed.add_busy_alerts(topology, "payments")
