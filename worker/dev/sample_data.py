"""Deterministic sample data for the example app: account profiles and payments, and the
topics they go to.

Until a Spark job computes profiles from history, this module generates accounts with a
known mean and spread, the matching profile records, and a payment stream in which a
small, reproducible fraction of payments are far outside their account's profile.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from worker.config import Settings
from worker.examples import payments as app
from worker.kafka.admin import Admin, TopicSpec


def create_example_topics(settings: Settings, partitions: int) -> None:
    """Create the example app's input and output topics (those that do not exist yet), as
    an operator would before its first start: the demo, ``worker dev sample-data``, the
    tests and the benchmarks all load the same topics."""
    Admin(settings).create_topics(
        [
            TopicSpec(app.PAYMENTS, partitions),
            TopicSpec(app.PROFILES, partitions, {"cleanup.policy": "compact"}),
            TopicSpec(app.ALERTS, partitions),
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


def payments(
    accts: list[Account], count: int, seed: int = 11, anomaly_rate: float = 0.01, start: int = 0
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, value) records for the ``payments`` stream; ids are ``p-<n>`` from ``start``."""
    rng = random.Random(seed + start)
    for n in range(start, start + count):
        acct = accts[rng.randrange(len(accts))]
        if rng.random() < anomaly_rate:
            amount = acct.mean + rng.choice((-1, 1)) * acct.std * rng.uniform(6, 10)
        else:
            amount = rng.gauss(acct.mean, acct.std)
        value = {"id": f"p-{n:09d}", "account": acct.id, "amount_cents": max(1, int(amount))}
        yield acct.id, value


def reference(
    profile_table: dict[str, dict[str, Any]], stream: list[tuple[str, dict[str, Any]]]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Plain-Python result of the example app: (totals per account, alerts by payment id)."""
    totals: dict[str, dict[str, Any]] = {}
    alerts: dict[str, dict[str, Any]] = {}
    for account, payment in stream:
        totals[account] = app.next_totals(totals.get(account), payment)
        alert = app.alert_for(payment, profile_table.get(account))
        if alert is not None:
            alerts[payment["id"]] = alert
    return totals, alerts
