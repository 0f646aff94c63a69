"""The example app: payments enriched with their account's profile as of their time and
their merchant's reference data (two joins), alerts on unusual payments, totals per
account, each account's payments of the last hour, an alert when an account that was
active goes quiet, and one when an account makes too many payments in 10 minutes. Built
with the DSL (docs/dsl.md, docs/joins.md): ``worker start`` builds it with its
application id.

Topics:
- ``payments`` (stream, keyed by account id): ``{"id", "account", "merchant",
  "amount_cents"}``; the record's timestamp is the payment's time (``ctx.timestamp``);
- ``account-profiles`` (compacted table, keyed by account id): the account's historical
  ``{"mean", "std", "n"}`` of amounts in cents, each record valid from its timestamp on.
  A Spark job computes it from history; ``worker dev sample-data`` loads a generated one;
- ``merchant-reference`` (compacted, keyed by merchant id): ``{"name", "category",
  "country"}``, reference data held whole by every worker (a global table);
- ``enriched-payments`` (output, keyed by account id): ``{"payment", "profile",
  "merchant"}``, each payment with the profile valid at its time and its merchant's
  reference data (None where there is none);
- ``payment-alerts`` (output): a payment more than ``ALERT_Z`` standard deviations from
  the mean of its account's profile as of its time;
- ``quiet-accounts`` (output): an account whose last payment is ``QUIET_AFTER_MS`` of
  stream time old, once per last payment;
- ``busy-accounts`` (output): an account with more than ``windowed.BUSY_PAYMENTS``
  payments in a 10-minute window (hopping, a window every 5 minutes), once per window,
  when it closes (:mod:`worker.examples.windowed`: an emit-final windowed aggregation with
  its windowed store ``busy-10m``).

The enrichment is a stream-table join with ``account-profiles`` read as a *versioned*
table (store ``account-profiles``, ``PROFILE_HISTORY_MS`` of history, changelog
``<application.id>-account-profiles-changelog``): a payment joins the profile written at
or before its own time, so a profile recomputed for a period and loaded after the
payments of that period came still gives each payment the profile of its time. Then a
global-table join with ``merchant-reference`` by the payment's merchant (the store
``merchant-reference``, no co-partitioning). The payments reach the joins through the
repartition topic ``<application.id>-with-profile-repartition`` (they are keyed by
account already; the hop puts the joins in a sub-topology of their own): a task's stream
time moves with every record it reads, and a profile valid from a later time, read before
the payments of that time, must not move the stream time of the totals, the quiet check
and the windows. ``payments`` and ``account-profiles`` must have equal partition counts.

Stores of the scoring sub-topology, each backed by its changelog
``<application.id>-<store>-changelog``:
- ``account-totals``: ``{"count", "sum_cents", "last_payment_ms", "quiet_alerted"}`` per
  account;
- ``recent-payments``: ``"<account>|<time, 13 digits>|<payment id>" -> amount_cents``,
  with a TTL of an hour of stream time, so it holds exactly the last hour's payments. A
  prefix query answers "payments of this account in the last hour":
  ``GET /stores/recent-payments/prefix?prefix=acct-00001|``.

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

from worker.dsl import StreamsBuilder
from worker.examples import windowed
from worker.processing import ProcessorContext
from worker.serde import JSON, STR

PAYMENTS = "payments"
PROFILES = "account-profiles"
MERCHANTS = "merchant-reference"
ENRICHED = "enriched-payments"
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
PROFILE_HISTORY_MS = 7 * 86_400_000  # how far back a payment finds its profile's versions
BY_ACCOUNT = "payments-by-account"  # the re-key in front of the joins
JOIN = "with-profile"  # the first join; it names the repartition topic


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


def with_profile(payment: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any]:
    """The first join's result. Pure: the tests' reference too."""
    return {"payment": payment, "profile": profile}


def merchant_of(account: str, enriched: dict[str, Any]) -> str | None:
    """The global table's key for a payment: its merchant (None, a miss, if it has none)."""
    merchant = enriched["payment"].get("merchant")
    return merchant if isinstance(merchant, str) else None


def with_merchant(enriched: dict[str, Any], merchant: dict[str, Any] | None) -> dict[str, Any]:
    """The second join's result: what ``enriched-payments`` carries. Pure: the tests'
    reference too."""
    return {**enriched, "merchant": merchant}


def alerts_of(enriched: dict[str, Any]) -> list[dict[str, Any]]:
    """The alert an enriched payment raises, if any."""
    alert = alert_for(enriched["payment"], enriched["profile"])
    return [] if alert is None else [alert]


def score_payment(ctx: ProcessorContext, account: str, payment: dict[str, Any]) -> None:
    at = ctx.timestamp
    totals = ctx.store(TOTALS)
    current = totals.get(account)
    quiet = quiet_alert(account, current, at)  # quiet past a boundary no punctuation saw
    if quiet is not None:
        ctx.forward(account, quiet)
    totals.put(account, next_totals(current, payment, at))
    ctx.store(RECENT).put(recent_key(account, at, payment["id"]), payment["amount_cents"])


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
        ctx.forward(account, alert)


def build() -> StreamsBuilder:
    """The topology ``worker start`` runs by default, as a builder: the worker builds it
    with its application id, which names the repartition topic."""
    builder = StreamsBuilder()
    builder.add_state_store(TOTALS, key_serde=STR, value_serde=JSON)
    builder.add_state_store(RECENT, key_serde=STR, value_serde=JSON, ttl_ms=HOUR_MS)
    payments = builder.stream(PAYMENTS, key_serde=STR, value_serde=JSON, name="payments")
    (
        payments.process(
            score_payment, stores=[TOTALS, RECENT], name="score", init=start_quiet_checks
        ).to(QUIET, name="quiet")
    )
    windowed.add_busy_alerts(payments)
    profiles = builder.table(PROFILES, name=PROFILES, history_ms=PROFILE_HISTORY_MS)
    merchants = builder.global_table(MERCHANTS, name=MERCHANTS)
    enriched = (
        payments.select_key(lambda account, payment: account, name=BY_ACCOUNT)
        .left_join(profiles, with_profile, name=JOIN)
        .left_join(merchants, with_merchant, key_mapper=merchant_of, name="with-merchant")
    )
    enriched.to(ENRICHED, name="enriched")
    enriched.flat_map_values(alerts_of, name="alert").to(ALERTS, name="alerts")
    return builder


def changelog(application_id: str, store: str) -> str:
    """The changelog topic of ``store`` when the app runs as ``application_id``."""
    return build().build(application_id).build().store(store)[1].changelog(application_id)
