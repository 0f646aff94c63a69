"""librdkafka's murmur2 partitioner and worker.partitioner agree on every key.

The worker, its producers and the Spark loaders must put a key on the partition (and so
the task) that owns its state. Producers configured with ``partitioner=murmur2_random``
let librdkafka choose; the worker computes it in Python. Here both answer for arbitrary
keys on a real broker, and the delivered partition must be the one Python predicts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.waiting import wait_until
from worker.partitioner import partition_for

PARTITIONS = 7

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    name = f"murmur2-agreement-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(timeout=30)

    def partition_count() -> int:
        topics = admin.list_topics(name, timeout=10).topics
        return len(topics[name].partitions) if name in topics else 0

    wait_until(lambda: partition_count() == PARTITIONS, 30, message=f"{name} has 7 partitions")
    return name


@pytest.fixture(scope="module")
def producer(bootstrap: str) -> Iterator[Producer]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 0,
            "message.timeout.ms": 30000,
        }
    )
    yield producer
    producer.flush(30)
    producer.close()  # stop librdkafka's threads before the session broker goes away


def delivered_partitions(producer: Producer, topic: str, keys: list[bytes]) -> list[int]:
    """Produce one record per key and return the partition each was delivered to, in order."""
    partitions: list[int | None] = [None] * len(keys)
    errors: list[KafkaError] = []

    def on_delivery(index: int) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                partitions[index] = msg.partition()

        return report

    for index, key in enumerate(keys):
        producer.produce(topic, key=key, value=b"v", on_delivery=on_delivery(index))
    remaining = producer.flush(30)

    assert remaining == 0, f"{remaining} records not delivered within 30s"
    assert not errors, errors
    assert None not in partitions
    return [p for p in partitions if p is not None]


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=20))
def test_librdkafka_murmur2_random_puts_every_key_where_the_worker_expects(
    producer: Producer, topic: str, keys: list[bytes]
) -> None:
    expected = [partition_for(key, PARTITIONS) for key in keys]

    assert delivered_partitions(producer, topic, keys) == expected
