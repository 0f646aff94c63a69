"""Writing records into topics from outside a task: sample data, demos, bulk loads.

Same partitioning as the worker (murmur2) and an idempotent producer with acks=all; the
count returned is only what the broker acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import confluent_kafka as ck

from worker.config import Settings
from worker.errors import WorkerError
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import is_partition_eof
from worker.serde import Serde


class LoadFailed(WorkerError):
    """Some records were not acknowledged."""


def produce_records(
    settings: Settings,
    topic: str,
    records: Iterable[tuple[Any, Any]],
    key_serde: Serde,
    value_serde: Serde,
    timeout: float = 60.0,
    *,
    timestamps: Iterable[int] | None = None,
) -> int:
    """Produce (key, value) pairs; return the number acknowledged or raise LoadFailed.

    ``timestamps``: each record's timestamp in ms, in step with ``records`` (the
    producer's clock when absent).
    """
    config = base_config(settings, "loader")
    config.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 10,
        }
    )
    producer = ck.Producer(config)
    acked = 0
    errors: list[str] = []

    def on_delivery(err: ck.KafkaError | None, _msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(str(err))

    times = iter(timestamps) if timestamps is not None else None
    for key, value in records:
        payload = (key_serde.serialize(key), value_serde.serialize(value))
        stamp = 0 if times is None else next(times)  # 0: the producer's clock
        while True:
            try:
                producer.produce(
                    topic, payload[1], payload[0], on_delivery=on_delivery, timestamp=stamp
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(timeout)
    if remaining or errors:
        raise LoadFailed(
            f"{topic}: {remaining} records unacknowledged, {len(errors)} failed"
            + (f" (first: {errors[0]})" if errors else "")
        )
    return acked


def read_topic(
    settings: Settings, topic: str, timeout: float = 30.0
) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic`` from the beginning to its current end."""
    config = base_config(settings, "reader")
    config.update(
        {
            "group.id": f"{settings.application_id}-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer = ck.Consumer(config)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in meta.partitions]
        consumer.assign(parts)
        pending = {p.partition for p in parts}
        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.05):  # the ends come alone: wait little
                err = msg.error()
                if err is None:
                    out.append((msg.key(), msg.value()))
                elif is_partition_eof(err):
                    pending.discard(msg.partition())
                else:
                    raise LoadFailed(f"reading {topic}: {err}")
        if pending:
            raise LoadFailed(f"reading {topic}: partitions {sorted(pending)} not read to the end")
        return out
    finally:
        consumer.close()
