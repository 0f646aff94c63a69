"""The example app: running totals per account and alerts on unusual payments.

Topics:
- ``payments`` (stream, keyed by account id): ``{"id", "account", "amount_cents"}``;
- ``account-profiles`` (compacted table, keyed by account id): the account's historical
  ``{"mean", "std", "n"}`` of amounts in cents. A Spark job computes it from history;
  ``worker dev sample-data`` loads a generated one;
- ``payment-alerts`` (output): a payment more than ``ALERT_Z`` standard deviations from
  its account's mean.

The ``account-totals`` store keeps ``{"count", "sum_cents"}`` per account, backed by the
changelog ``<application.id>-account-totals-changelog``. Both stores live in one
sub-topology, so ``payments`` and ``account-profiles`` must be co-partitioned.
"""

from __future__ import annotations

from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR

PAYMENTS = "payments"
PROFILES = "account-profiles"
ALERTS = "payment-alerts"
TOTALS = "account-totals"
ALERT_Z = 4.0
MIN_HISTORY = 5


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


def next_totals(current: dict[str, Any] | None, payment: dict[str, Any]) -> dict[str, Any]:
    """Totals after one more payment. Pure: the tests' reference computation uses it too."""
    current = current or {"count": 0, "sum_cents": 0}
    return {
        "count": current["count"] + 1,
        "sum_cents": current["sum_cents"] + payment["amount_cents"],
    }


def score_payment(ctx: ProcessorContext, account: str, payment: dict[str, Any]) -> None:
    totals = ctx.store(TOTALS)
    totals.put(account, next_totals(totals.get(account), payment))
    alert = alert_for(payment, ctx.store(PROFILES).get(account))
    if alert is not None:
        ctx.forward(account, alert)


def build() -> Topology:
    """The topology ``worker start`` runs by default."""
    return (
        Topology()
        .add_source("payments", PAYMENTS, key_serde=STR, value_serde=JSON)
        .add_table(PROFILES, PROFILES, key_serde=STR, value_serde=JSON)
        .add_store(TOTALS, key_serde=STR, value_serde=JSON)
        .add_processor("score", score_payment, parents=["payments"], stores=[TOTALS, PROFILES])
        .add_sink("alerts", ALERTS, parents=["score"], key_serde=STR, value_serde=JSON)
    )
