"""A positioned consumer asks for a newly assigned topic's metadata at once (librdkafka's own
topic scan runs once a second: a just-started worker read a release up to 1 s late)."""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pytest

from worker.kafka import consumers


class _StubConsumer:
    def __init__(self, config: dict[str, Any]) -> None:
        self.metadata_asked: list[str] = []
        self.fail = False

    def incremental_assign(self, parts: list[ck.TopicPartition]) -> None:
        pass

    def resume(self, parts: list[ck.TopicPartition]) -> None:
        pass

    def list_topics(self, topic: str, timeout: float) -> None:
        self.metadata_asked.append(topic)
        if self.fail:
            raise ck.KafkaException(ck.KafkaError(ck.KafkaError._TIMED_OUT))


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> consumers._PositionedConsumer:
    monkeypatch.setattr(consumers.ck, "Consumer", _StubConsumer)
    return consumers._PositionedConsumer({})


def _stub(consumer: consumers._PositionedConsumer) -> _StubConsumer:
    stub = consumer._consumer
    assert isinstance(stub, _StubConsumer)
    return stub


def test_metadata_is_asked_once_per_new_topic(consumer: consumers._PositionedConsumer) -> None:
    stub = _stub(consumer)
    consumer.add({("a", 0): 5, ("a", 1): None, ("b", 0): 0})
    consumer.add({("a", 2): 0, ("c", 0): 1})
    assert stub.metadata_asked == ["a", "b", "c"]


def test_a_failed_metadata_request_is_asked_again_next_time(
    consumer: consumers._PositionedConsumer,
) -> None:
    stub = _stub(consumer)
    stub.fail = True
    consumer.add({("a", 0): 0})
    stub.fail = False
    consumer.add({("a", 1): 0})
    assert stub.metadata_asked == ["a", "a"]
    assert consumer.assigned == {("a", 0), ("a", 1)}
