"""Shared set-up for tests of the example app: topics, sample data, reference results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.kafka_io import fold, read_partition
from worker.config import Settings, load
from worker.dev import sample_data
from worker.dev.demo import load_sample_data
from worker.examples import payments as app
from worker.kafka.loader import produce_records, read_topic
from worker.serde import JSON, STR

PARTITIONS = 4


@dataclass
class ExampleData:
    settings: Settings
    accounts: list[sample_data.Account]
    stream: list[tuple[str, dict[str, Any]]]

    @property
    def profiles(self) -> dict[str, dict[str, Any]]:
        return dict(sample_data.profiles(self.accounts))

    def produce(self, count: int, anomaly_rate: float = 0.02) -> None:
        chunk = list(
            sample_data.payments(
                self.accounts, count, anomaly_rate=anomaly_rate, start=len(self.stream)
            )
        )
        produce_records(self.settings, app.PAYMENTS, chunk, STR, JSON)
        self.stream.extend(chunk)

    def reference(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        return sample_data.reference(self.profiles, self.stream)

    def alerts(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for _, v in read_topic(self.settings, app.ALERTS) if v]

    def totals_from_changelog(self, application_id: str) -> dict[str, dict[str, Any]]:
        topic = f"{application_id}-{app.TOTALS}-changelog"
        table: dict[bytes, bytes] = {}
        for partition in range(PARTITIONS):
            table.update(fold(read_partition(self.settings.bootstrap_servers, topic, partition)))
        return {k.decode(): orjson.loads(v) for k, v in table.items()}


def example_data(bootstrap: str, accounts: int = 60) -> ExampleData:
    """Create the example topics on ``bootstrap`` and load the account profiles."""
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    load_sample_data(settings, accounts, 0, PARTITIONS)
    return ExampleData(settings, sample_data.accounts(accounts), [])
