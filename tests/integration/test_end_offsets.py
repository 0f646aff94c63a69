"""Admin.request_end_offsets against the real broker: asked without waiting, collected
once ready, unknown partitions left out."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from tests.support.waiting import wait_until
from worker.config import Settings
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.consumers import WatermarkReader

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]


def test_end_offsets_requested_without_waiting_come_back_once_ready(bootstrap: str) -> None:
    topic = f"end-offsets-{uuid.uuid4().hex[:8]}"
    settings = Settings.model_validate(
        {"application.id": f"test-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap}
    )
    admin = Admin(settings)
    admin.create_topics([TopicSpec(topic, 2)])
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):  # one record per batch: ListOffsets is right for those here
        producer.produce(topic, value=b"v%d" % i, partition=0)
        producer.flush(10)

    pending = admin.request_end_offsets([(topic, 0), (topic, 1), ("no-such-topic", 0)])

    wait_until(pending.ready, timeout=10, message="ListOffsets answered")
    assert pending.result() == {(topic, 0): 3, (topic, 1): 0}


def test_one_watermark_reader_answers_again_and_again_with_the_fetch_high_watermark(
    bootstrap: str,
) -> None:
    topic = f"watermarks-{uuid.uuid4().hex[:8]}"
    settings = Settings.model_validate(
        {"application.id": f"test-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap}
    )
    Admin(settings).create_topics([TopicSpec(topic, 2)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    reader = WatermarkReader(settings)
    try:
        assert reader.read([(topic, 0), (topic, 1)]) == {(topic, 0): 0, (topic, 1): 0}
        for i in range(500):  # batched: ListOffsets would under-report these here
            producer.produce(topic, value=b"v%d" % i, partition=0)
        producer.flush(10)
        assert reader.read([(topic, 0)]) == {(topic, 0): 500}
        assert reader.read([(topic, 0), (topic, 1)]) == {(topic, 0): 500, (topic, 1): 0}
    finally:
        reader.close()


# s: a watermark read of a changelog the reader never read. The processing thread waits
# for it while it applies an assignment that opens tasks with local state, so every task
# of the worker stops meanwhile. Assigned before its metadata was asked for, such a read
# waited for librdkafka's 500 ms offset-query retry (0.5-1.2 s on this broker), while
# this one answers in tens of milliseconds (docs/platform-notes.md).
FIRST_READ_S = 0.4


def test_a_watermark_read_of_a_new_topic_does_not_wait_for_librdkafkas_retry(
    bootstrap: str,
) -> None:
    settings = Settings.model_validate(
        {"application.id": f"test-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap}
    )
    topics = [f"watermarks-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    Admin(settings).create_topics([TopicSpec(t, 2) for t in topics])
    reader = WatermarkReader(settings)
    try:
        reader.read([(topics[0], 0)])  # connected, as the worker's reader is
        for topic in topics[1:]:
            started = time.monotonic()
            ends = reader.read([(topic, 0), (topic, 1)])
            took = time.monotonic() - started
            assert ends == {(topic, 0): 0, (topic, 1): 0}
            assert took < FIRST_READ_S, f"{topic}: the first read took {took:.2f} s"
    finally:
        reader.close()
