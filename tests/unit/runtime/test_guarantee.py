"""The processing guarantee picks the producer and the commit protocol together, once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeGroupOffsets
from worker.config import Settings, load
from worker.errors import RebalanceInProgress
from worker.kafka import collector as collector_module
from worker.kafka import transactions
from worker.observability import Metrics
from worker.runtime import guarantee as guarantee_module
from worker.runtime.guarantee import choose_guarantee
from worker.tasks.commit_protocols import AtLeastOnceCommit, ExactlyOnceCommit


class Producer:
    """A confluent-kafka producer stand-in that records what it is given."""

    made: list[Producer] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.produced: list[tuple[Any, ...]] = []
        Producer.made.append(self)

    def init_transactions(self, timeout: float) -> None:
        return None

    def begin_transaction(self) -> None:
        return None

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.produced.append(args)


class Member(FakeGroupOffsets):
    commit_generation = (3, "m-1")


def settings(guarantee: str) -> Settings:
    return load(
        None,
        {
            "application.id": "app",
            "bootstrap.servers": "127.0.0.1:9",
            "processing.guarantee": guarantee,
        },
        environ={},
    ).settings


@pytest.fixture(autouse=True)
def fake_producers(monkeypatch: pytest.MonkeyPatch) -> None:
    Producer.made = []
    monkeypatch.setattr(collector_module.ck, "Producer", Producer)
    monkeypatch.setattr(transactions.ck, "Producer", Producer)


def test_at_least_once_writes_sinks_and_changelogs_through_two_plain_producers() -> None:
    guarantee = choose_guarantee(settings("at_least_once"), "p-1", Metrics())

    guarantee.collector.send("out", b"k", b"v")
    guarantee.collector.send_changelog("log", 0, [(b"k", b"v")])

    changelogs, sinks = Producer.made
    assert "transactional.id" not in changelogs.config
    assert sinks.config["delivery.report.only.error"] is True
    assert [p[0] for p in sinks.produced] == ["out"]
    assert [p[0] for p in changelogs.produced] == ["log"]
    assert isinstance(guarantee.commit_protocol(Member()), AtLeastOnceCommit)


def test_exactly_once_writes_everything_through_one_transactional_producer() -> None:
    guarantee = choose_guarantee(settings("exactly_once_v2"), "p-1", Metrics())

    guarantee.collector.send("out", b"k", b"v")
    guarantee.collector.send_changelog("log", 0, [(b"k", b"v")])

    (producer,) = Producer.made
    assert producer.config["transactional.id"] == "app-p-1"
    assert (
        producer.config["transaction.timeout.ms"]
        == settings("exactly_once_v2").transaction_timeout_ms_effective
    )
    assert [p[0] for p in producer.produced] == ["out", "log"]
    assert isinstance(guarantee.commit_protocol(Member()), ExactlyOnceCommit)


def test_exactly_once_commits_name_the_generation_the_member_may_commit_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    named: list[tuple[Any, ...]] = []
    monkeypatch.setattr(guarantee_module, "group_metadata", lambda *a: named.append(a) or b"m")
    member = Member()
    protocol = choose_guarantee(settings("exactly_once_v2"), "p-1", Metrics()).commit_protocol(
        member
    )
    assert isinstance(protocol, ExactlyOnceCommit)

    assert protocol([]) == {}
    assert named == [("app", 3, "m-1", "")]
    member.commit_generation = None  # type: ignore[assignment]
    with pytest.raises(RebalanceInProgress):
        protocol([])
