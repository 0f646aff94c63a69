"""Deterministic sample data for the example app: account profiles and payments, and the
topics they go to.

Until a Spark job computes profiles from history, this module generates accounts with a
known mean and spread, the matching profile records, and a payment stream in which a
small, reproducible fraction of payments are far outside their account's profile, some
accounts stop paying (``going_quiet``), some pay in bursts (``bursting``) and some pay
differently from a point on (``payments(changes=)``, ``enrichment.changing``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.config import Settings
from worker.dev.enrichment import MERCHANTS, ProfileChange, ProfileHistory, expected_enriched
from worker.examples import merchants, windowed
from worker.examples import payments as app
from worker.kafka.admin import Admin, TopicSpec
from worker.partitioner import partition_for


def create_example_topics(settings: Settings, partitions: int) -> None:
    """Create the example app's input and output topics (those that do not exist yet), as
    an operator would before its first start: the demo, ``worker dev sample-data``, the
    tests and the benchmarks all load the same topics."""
    Admin(settings).create_topics(
        [
            TopicSpec(app.PAYMENTS, partitions),
            TopicSpec(app.PROFILES, partitions, {"cleanup.policy": "compact"}),
            TopicSpec(app.MERCHANTS, partitions, {"cleanup.policy": "compact"}),
            TopicSpec(app.ENRICHED, partitions),
            TopicSpec(app.ALERTS, partitions),
            TopicSpec(app.QUIET, partitions),
            TopicSpec(app.BUSY, partitions),
            TopicSpec(merchants.MERCHANT_COUNTS, partitions),
        ]
    )


@dataclass(frozen=True, slots=True)
class Account:
    id: str
    mean: float
    std: float


def accounts(count: int, seed: int = 7) -> list[Account]:
    rng = random.Random(seed)
    result = []
    for i in range(count):
        mean = rng.uniform(1_000, 50_000)
        result.append(
            Account(f"acct-{i:05d}", round(mean, 2), round(mean * rng.uniform(0.05, 0.3), 2))
        )
    return result


def profiles(accts: list[Account], history: int = 50) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, value) records for the ``account-profiles`` table."""
    for acct in accts:
        yield acct.id, {"mean": acct.mean, "std": acct.std, "n": history}


@dataclass(frozen=True, slots=True)
class EventClock:
    """The event time of generated payments: payment ``n`` is made at ``base_ms + n *
    step_ms``, so a reference computation knows every payment's time from its number."""

    base_ms: int
    step_ms: int

    def at(self, n: int) -> int:
        return self.base_ms + n * self.step_ms

    def times(self, start: int, count: int) -> list[int]:
        return [self.at(n) for n in range(start, start + count)]


def going_quiet(accts: list[Account], how_many: int, first: int, every: int) -> dict[str, int]:
    """``how_many`` accounts, spread over ``accts``, that stop paying: the j-th from payment
    number ``first + j * every`` on (for ``payments(quiet=)``)."""
    step = max(1, len(accts) // max(1, how_many))
    return {accts[j * step].id: first + j * every for j in range(min(how_many, len(accts)))}


BURST_SHARE = 20  # during its burst, an account makes every 20th payment


def bursting(
    accts: list[Account], how_many: int, first: int, every: int, length: int
) -> dict[str, range]:
    """``how_many`` accounts, spread over ``accts`` between those of ``going_quiet``, that
    pay in a burst: the j-th makes every ``BURST_SHARE``-th of the ``length`` payments
    from number ``first + j * every`` on (for ``payments(bursts=)``), besides its usual
    ones."""
    step = max(1, len(accts) // max(1, how_many))
    return {
        accts[(j * step + step // 2) % len(accts)].id: range(
            first + j * every, first + j * every + length
        )
        for j in range(min(how_many, len(accts)))
    }


def payments(
    accts: list[Account],
    count: int,
    seed: int = 11,
    anomaly_rate: float = 0.01,
    start: int = 0,
    quiet: Mapping[str, int] | None = None,
    bursts: Mapping[str, range] | None = None,
    changes: Mapping[str, ProfileChange] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, value) records for the ``payments`` stream; ids are ``p-<n>`` from ``start``.

    ``quiet``: account id -> the payment number from which that account pays no more
    (some accounts must stay active); ``bursts``: account id -> the payment numbers of
    its burst (``bursting``); ``changes``: account id -> the spending it follows from a
    payment number on (``enrichment.changing``).
    """
    rng = random.Random(seed + start)
    # a generator of its own, so adding merchants left every other choice as it was
    shops = random.Random(seed * 1_000_003 + start)
    by_id = {acct.id: acct for acct in accts}
    for n in range(start, start + count):
        acct = accts[rng.randrange(len(accts))]
        while quiet and quiet.get(acct.id, n + 1) <= n:
            acct = accts[rng.randrange(len(accts))]
        if bursts and n % BURST_SHARE == 0:
            acct = next((by_id[a] for a, burst in bursts.items() if n in burst), acct)
        mean, std = acct.mean, acct.std
        change = changes.get(acct.id) if changes else None
        if change is not None and n >= change.from_n:
            mean, std = change.mean, change.std
        if rng.random() < anomaly_rate:
            amount = mean + rng.choice((-1, 1)) * std * rng.uniform(6, 10)
        else:
            amount = rng.gauss(mean, std)
        value = {
            "id": f"p-{n:09d}",
            "account": acct.id,
            "merchant": f"merchant-{shops.randrange(MERCHANTS):02d}",
            "amount_cents": max(1, int(amount)),
        }
        yield acct.id, value


@dataclass
class Reference:
    """What the example app must output for a payment stream, computed in plain Python."""

    totals: dict[str, dict[str, Any]] = field(default_factory=dict)  # account -> totals
    alerts: dict[str, dict[str, Any]] = field(default_factory=dict)  # payment id -> alert
    quiet: dict[str, dict[str, Any]] = field(default_factory=dict)  # quiet_id -> alert
    written: dict[str, int] = field(default_factory=dict)  # every recent-payments key
    recent: dict[str, int] = field(default_factory=dict)  # ... unexpired at the end
    busy: dict[str, dict[str, Any]] = field(default_factory=dict)  # alert_id -> busy alert
    enriched: dict[str, dict[str, Any]] = field(default_factory=dict)  # payment id -> value
    # the DSL app (worker.examples.merchants): (merchant, window start) -> payments
    merchant_windows: dict[tuple[str, int], int] = field(default_factory=dict)


def quiet_id(alert: dict[str, Any]) -> str:
    """A quiet alert's identity: the account and the last payment it was quiet after."""
    return f"{alert['account']}@{alert['last_payment_ms']}"


def reference(
    profiles: ProfileHistory,
    stream: list[tuple[str, dict[str, Any]]],
    clock: EventClock,
    partitions: int,
    merchant_table: Mapping[str, dict[str, Any]] | None = None,
) -> Reference:
    """Plain-Python result of the example app over ``stream`` (payment ``n`` at
    ``clock.at(n)``, in time order), once every payment is processed and committed.

    Each payment is enriched with its account's profile as of its time and with its
    merchant's row of ``merchant_table``; the alerts judge it by that profile.

    Its quiet alerts do not depend on when punctuations ran (``payments`` module doc):
    an account alerts for a last payment when the payment after it comes on or after
    ``quiet_at`` of it, or, for its final one, when its task's final stream time (the
    latest payment time of its partition) reaches ``quiet_at``. ``recent`` holds the keys
    younger than an hour at that final stream time; older ones are expired (absent from
    queries, deleted and tombstoned as the sweep reaches them). ``busy`` holds the alerts
    of the 10-minute windows closed at that final stream time (none of the payments is
    late: they are in time order).
    """
    out = Reference()
    stream_time: dict[int, int] = {}
    timed: dict[int, list[tuple[int, dict[str, Any]]]] = {}  # partition -> its payments

    def partition_of(account: str) -> int:
        return partition_for(account.encode(), partitions)  # the STR serde

    for n, (account, payment) in enumerate(stream):
        at = clock.at(n)
        partition = partition_of(account)
        stream_time[partition] = max(stream_time.get(partition, -1), at)
        timed.setdefault(partition, []).append((at, payment))
        current = out.totals.get(account)
        quiet = app.quiet_alert(account, current, at)
        if quiet is not None:
            out.quiet[quiet_id(quiet)] = quiet
        out.totals[account] = app.next_totals(current, payment, at)
        out.written[app.recent_key(account, at, payment["id"])] = payment["amount_cents"]
        enriched = expected_enriched(account, payment, at, profiles, merchant_table or {})
        out.enriched[payment["id"]] = enriched
        alert = app.alert_for(payment, enriched["profile"])
        if alert is not None:
            out.alerts[payment["id"]] = alert
    final = {a: stream_time[partition_of(a)] for a in out.totals}
    for account, totals in out.totals.items():
        quiet = app.quiet_alert(account, totals, final[account])
        if quiet is not None:
            out.quiet[quiet_id(quiet)] = quiet
            totals["quiet_alerted"] = True
    for key, amount in out.written.items():
        account, written_at, _ = key.split("|")
        if int(written_at) > final[account] - app.HOUR_MS:
            out.recent[key] = amount
    for partition, paid in timed.items():
        for alert in windowed.expected_alerts(paid, stream_time[partition]).values():
            out.busy[windowed.alert_id(alert)] = alert
    out.merchant_windows = merchants.reference((p, clock.at(n)) for n, (_, p) in enumerate(stream))
    return out
