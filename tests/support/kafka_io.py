"""Reading topics from tests, independently of the worker's own code paths."""

from __future__ import annotations

import time

import confluent_kafka as ck


def read_partition(
    bootstrap: str, topic: str, partition: int, until: int | None = None, timeout: float = 30.0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of ``topic``/``partition`` from the start through offset ``until``
    (inclusive), or to the end of the partition when ``until`` is None."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"reading {topic}-{partition}: {err}")
                if until is not None and msg.offset() > until:
                    return out
                out.append((msg.offset(), msg.key(), msg.value()))
                if until is not None and msg.offset() == until:
                    return out
        raise AssertionError(f"reading {topic}-{partition} did not finish in {timeout}s")
    finally:
        consumer.close()


def fold(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """The table a changelog implies: the latest value per key, deletes removed."""
    table: dict[bytes, bytes] = {}
    for _, key, value in records:
        if key is None:
            continue
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def records_since(bootstrap: str, topic: str, partition: int, since_ms: int) -> int:
    """How many records of the partition carry a timestamp at or after ``since_ms``."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    count = 0
    try:
        consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        return count
                    raise AssertionError(f"reading {topic}-{partition}: {err}")
                if msg.timestamp()[1] >= since_ms:
                    count += 1
        raise AssertionError(f"reading {topic}-{partition} did not finish")
    finally:
        consumer.close()


def produce_raw(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> None:
    """Produce raw (key, value) bytes in order, partitioned by murmur2 like the worker."""
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "message.max.bytes": 10_000_000,
        }
    )
    failures: list[str] = []

    def on_delivery(err: ck.KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for key, value in records:
        producer.produce(topic, value, key, on_delivery=on_delivery)
    remaining = producer.flush(30)
    assert not remaining and not failures, f"producing to {topic}: {failures or remaining}"
