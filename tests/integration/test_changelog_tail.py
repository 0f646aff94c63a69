"""ChangelogTailReader against the real broker: the last records of each partition, to
the end the fetch path reports (ListOffsets, which the tail offset starts from, may
under-report batched records here: then it reads a little more)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from worker.config import Settings
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.changelog_tail import ChangelogTailReader

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]


def test_the_tail_reader_returns_each_partitions_last_records_in_order(bootstrap: str) -> None:
    topic = f"tail-{uuid.uuid4().hex[:8]}"
    settings = Settings.model_validate(
        {"application.id": f"test-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap}
    )
    Admin(settings).create_topics([TopicSpec(topic, 2)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(200):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        if i % 50 == 49:  # batches of 50: the tail starts at most a batch early here
            producer.flush(10)
    producer.produce(topic, value=b"no key", partition=0)
    producer.produce(topic, key=b"gone", value=None, partition=0)
    producer.flush(10)
    reader = ChangelogTailReader(settings, records=5)
    try:
        found = reader.read([(topic, 0), (topic, 1)])
        assert found[(topic, 1)] == []
        tail = found[(topic, 0)]
        assert tail[-4:] == [(b"k197", b"v197"), (b"k198", b"v198"), (b"k199", b"v199")] + [
            (b"gone", None)
        ]
        assert len(tail) <= 5 + 50  # not the whole partition
        producer.produce(topic, key=b"later", value=b"v", partition=0)
        producer.flush(10)
        assert reader.read([(topic, 0)])[(topic, 0)][-1] == (b"later", b"v")
    finally:
        reader.close()
