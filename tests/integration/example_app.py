"""Shared set-up for tests of the example app: topics, sample data, reference results."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.support.kafka_io import fold, read_partition
from tests.support.waiting import wait_until
from worker.config import Settings, load
from worker.dev import enrichment, sample_data
from worker.dev.demo import load_sample_data
from worker.dev.enrichment import ProfileChange, ProfileHistory, merchant_reference
from worker.examples import payments as app
from worker.kafka.loader import produce_records, read_topic
from worker.serde import JSON, STR
from worker.state.ttl import decode as ttl_decode

PARTITIONS = 4
# The app's tasks: its scoring sub-topology's (0_x), then its joins' (1_x).
TASKS = [f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS)]
# The payments' event clock starts this long before the test (a payment a second), so that
# a test's payments end near now: Apache Kafka 4 refuses records stamped more than an hour
# ahead of its clock (log.message.timestamp.after.max.ms, INVALID_TIMESTAMP; the test
# broker takes any time), and the longest test produces 30,000.
HISTORY_MS = 9 * 3_600_000


@dataclass
class ExampleData:
    settings: Settings
    accounts: list[sample_data.Account]
    stream: list[tuple[str, dict[str, Any]]]
    clock: sample_data.EventClock  # payment n's time: a second of event time per payment
    quiet: dict[str, int] = field(default_factory=dict)  # accounts that stop paying
    bursts: dict[str, range] = field(default_factory=dict)  # accounts paying in a burst
    changes: dict[str, ProfileChange] = field(default_factory=dict)  # a second profile each

    @property
    def history(self) -> ProfileHistory:
        """The profiles loaded: one per account before the first payment, and the
        changing accounts' second ones."""
        return ProfileHistory.of(self.accounts, self.clock.base_ms - 1, self.changes, self.clock.at)

    @property
    def profiles(self) -> dict[str, dict[str, Any]]:
        return self.history.latest()

    def produce(self, count: int, anomaly_rate: float = 0.02) -> None:
        chunk = list(
            sample_data.payments(
                self.accounts,
                count,
                anomaly_rate=anomaly_rate,
                start=len(self.stream),
                quiet=self.quiet,
                bursts=self.bursts,
                changes=self.changes,
            )
        )
        times = self.clock.times(len(self.stream), count)
        produce_records(self.settings, app.PAYMENTS, chunk, STR, JSON, timestamps=times)
        self.stream.extend(chunk)

    def expected(self) -> sample_data.Reference:
        return sample_data.reference(
            self.history, self.stream, self.clock, PARTITIONS, merchant_reference()
        )

    def reference(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(totals per account, alerts by payment id) the app must output."""
        expected = self.expected()
        return expected.totals, expected.alerts

    def alerts(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for _, v in read_topic(self.settings, app.ALERTS) if v]

    def enriched(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for _, v in read_topic(self.settings, app.ENRICHED) if v]

    def quiet_alerts(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for _, v in read_topic(self.settings, app.QUIET) if v]

    def busy_alerts(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for _, v in read_topic(self.settings, app.BUSY) if v]

    def totals_from_changelog(self, application_id: str) -> dict[str, dict[str, Any]]:
        return self.store_from_changelog(application_id, app.TOTALS)

    def store_from_changelog(self, application_id: str, store: str) -> dict[str, Any]:
        topic = f"{application_id}-{store}-changelog"
        table: dict[bytes, bytes] = {}
        for partition in range(PARTITIONS):
            table.update(fold(read_partition(self.settings.bootstrap_servers, topic, partition)))
        unwrap = (lambda v: ttl_decode(v)[1]) if store == app.RECENT else (lambda v: v)
        return {k.decode(): orjson.loads(unwrap(v)) for k, v in table.items()}


def example_data(bootstrap: str, accounts: int = 60, changing: int = 0) -> ExampleData:
    """Create the example topics on ``bootstrap`` and load the account profiles (and,
    for ``changing`` accounts, a second one valid from their payment 1000, 1500...)
    and the merchant reference data."""
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    clock = sample_data.EventClock(int(time.time() * 1000) - HISTORY_MS, 1_000)
    accts = sample_data.accounts(accounts)
    changes = enrichment.changing(accts, changing, 1_000, 500)
    history = ProfileHistory.of(accts, clock.base_ms - 1, changes, clock.at)
    load_sample_data(settings, accounts, 0, PARTITIONS, profiles=history)
    # Three accounts go quiet, from payment 300, 600 and 900 on: a quiet alert each
    # 20 minutes (1200 payments) of event time later.
    quiet = sample_data.going_quiet(accts, 3, 300, 300)
    # Two accounts pay in 10-minute bursts, from payment 500 and 2000 on: busy alerts.
    bursts = sample_data.bursting(accts, 2, 500, 1500, 600)
    return ExampleData(settings, accts, [], clock, quiet, bursts, changes)


def wait_profiles_served(data: ExampleData, worker: Any, timeout: float = 90.0) -> None:
    """Wait until the joins' versioned table serves every account's profile (asked of
    ``worker``, which redirects to each key's owner). Tests that check alerts start their
    payments after this, as they did when the worker read a task's partitions in fetch
    order (a payment produced while a joins' task was still reading its profiles joined
    none); it now reads them in timestamp order (docs/joins.md)."""

    def served(account: str) -> bool:
        try:
            status, body = worker.get(f"/stores/{app.PROFILES}/keys/{account}")
        except OSError:
            return False
        return status == 200 and orjson.loads(body).get("value") is not None

    wait_until(
        lambda: all(served(a.id) for a in data.accounts), timeout, message="every profile served"
    )
