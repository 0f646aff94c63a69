"""The data consumer against the real brokers: what a task reading several partitions
relies on (worker.tasks.partition_group).

* Its batches hold records only; where each partition's fetch reached its end comes
  from ``take_ends``, once per end, for an empty partition too, and past a
  transaction's commit marker under read_committed (else a transactional input, say
  an exactly-once repartition topic, would never look caught up and its task would
  wait for it for ever).
* A paused partition delivers nothing more, and once resumed goes on from the record
  after the last one delivered: records fetched ahead before the pause are neither lost
  nor delivered twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.waiting import wait_until
from worker.assignment.task_id import TP
from worker.config import Settings
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.consumers import DataConsumer

pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu", "kafka")]


@pytest.fixture
def topic(bootstrap: str) -> str:
    name = f"data-ends-{uuid.uuid4().hex[:8]}"
    Admin(settings(bootstrap)).create_topics([TopicSpec(name, 2)])
    return name


@pytest.fixture
def consumer(bootstrap: str) -> Iterator[DataConsumer]:
    made = DataConsumer(settings(bootstrap))
    try:
        yield made
    finally:
        made.close()


def settings(bootstrap: str) -> Settings:
    return Settings.model_validate(
        {"application.id": f"test-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap}
    )


def produce(bootstrap: str, topic: str, partition: int, count: int, first: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(10) == 0


class Reader:
    """Consumes into ``records`` (offsets per partition) and ``ends`` (the last end each
    partition reported)."""

    def __init__(self, consumer: DataConsumer) -> None:
        self.consumer = consumer
        self.records: dict[TP, list[int]] = {}
        self.ends: dict[TP, int] = {}
        self.reports = 0

    def step(self) -> bool:
        batch: list[Any] = self.consumer.consume(500, 0.1)
        for msg in batch:
            assert msg.error() is None
            self.records.setdefault((msg.topic(), msg.partition()), []).append(msg.offset())
        ends = self.consumer.take_ends()
        self.reports += len(ends)
        self.ends.update(ends)
        return True


def test_ends_come_apart_from_the_records_once_per_end(
    bootstrap: str, topic: str, consumer: DataConsumer
) -> None:
    produce(bootstrap, topic, 0, 300)
    p0, p1 = (topic, 0), (topic, 1)
    consumer.add({p0: None, p1: None})
    reader = Reader(consumer)

    wait_until(lambda: reader.step() and reader.ends == {p0: 300, p1: 0}, 20, message="ends")
    assert reader.records == {p0: list(range(300))}
    for _ in range(5):
        reader.step()
    assert reader.reports == 2, "an end is reported once"

    produce(bootstrap, topic, 1, 10)
    wait_until(lambda: reader.step() and reader.ends.get(p1) == 10, 20, message="a new end")
    assert reader.records[p1] == list(range(10))


def test_a_committed_transactions_end_is_past_its_marker(
    bootstrap: str, topic: str, consumer: DataConsumer
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": uuid.uuid4().hex})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=0)
    producer.commit_transaction(30)
    p0 = (topic, 0)
    consumer.add({p0: None})
    reader = Reader(consumer)

    wait_until(lambda: reader.step() and p0 in reader.ends, 20, message="an end")

    assert reader.records[p0] == list(range(20))
    assert reader.ends[p0] > reader.records[p0][-1]


def test_a_paused_partition_resumes_after_the_last_record_delivered(
    bootstrap: str, topic: str, consumer: DataConsumer
) -> None:
    produce(bootstrap, topic, 0, 3000)
    p0 = (topic, 0)
    consumer.add({p0: None})
    reader = Reader(consumer)
    wait_until(lambda: reader.step() and reader.records.get(p0), 20, message="records")
    delivered = len(reader.records[p0])
    assert delivered < 3000, "librdkafka holds the rest, fetched ahead or not"

    consumer.pause([p0])
    for _ in range(5):
        reader.step()
    assert len(reader.records[p0]) == delivered

    consumer.resume([p0])
    wait_until(lambda: reader.step() and reader.ends.get(p0) == 3000, 20, message="the end")
    assert reader.records[p0] == list(range(3000))


def test_a_partition_paused_then_removed_is_fetched_again_when_added_back(
    bootstrap: str, topic: str, consumer: DataConsumer
) -> None:
    """A task revoked (or revived) while its partition group had paused a partition
    gets it back unpaused: its new partition group starts with nothing paused, so a
    partition still paused would never be fetched again."""
    produce(bootstrap, topic, 0, 3000)
    p0 = (topic, 0)
    consumer.add({p0: None})
    reader = Reader(consumer)
    wait_until(lambda: reader.step() and reader.records.get(p0), 20, message="records")
    consumer.pause([p0])
    consumer.remove([p0])

    consumer.add({p0: 0})
    reader.records.clear()
    wait_until(lambda: reader.step() and reader.ends.get(p0) == 3000, 20, message="the end")
    assert reader.records[p0] == list(range(3000))
