"""One key of a changelog: find its latest record, append a newer one (``worker state repair``).

A changelog value the application cannot decode comes back with every restore: wiping
the task only restores it again. The repair appends a newer record for the key to the
partition holding it, a tombstone (the key is deleted when restored) or a corrected
value; restores and standbys apply it after the bad one, and compaction drops the bad one
later. Records are raw bytes, exactly as the changelog holds them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import confluent_kafka as ck

from worker.config import Settings
from worker.errors import WorkerError
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import is_partition_eof


class RepairFailed(WorkerError):
    """The changelog could not be read or written: nothing, or nothing more, was written."""


@dataclass(frozen=True)
class KeyRecord:
    """The latest record of one key in one changelog partition (value None: tombstone)."""

    partition: int
    offset: int
    value: bytes | None


def partition_count(settings: Settings, topic: str, timeout: float) -> int:
    """Partitions of ``topic``. Raises RepairFailed when it does not exist or no broker answers."""
    consumer = ck.Consumer(_reader_config(settings))
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    except ck.KafkaException as exc:
        raise RepairFailed(f"no metadata for {topic}: {exc.args[0]}") from None
    finally:
        consumer.close()
    if meta is None or meta.error is not None or not meta.partitions:
        raise RepairFailed(f"topic {topic} does not exist (is the store name right?)")
    return len(meta.partitions)


def latest_records(
    settings: Settings, topic: str, key: bytes, partitions: list[int], timeout: float
) -> dict[int, KeyRecord]:
    """The latest committed record of ``key`` in each of ``partitions`` that holds one,
    read from the beginning to the end of each partition.

    Raises:
        RepairFailed: a partition was not read to its end within ``timeout`` seconds.
    """
    consumer = ck.Consumer(_reader_config(settings))
    found: dict[int, KeyRecord] = {}
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                error = msg.error()
                if error is None:
                    if msg.key() == key:
                        partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
                        found[partition] = KeyRecord(partition, offset, msg.value())
                elif is_partition_eof(error):
                    pending.discard(msg.partition())
                else:
                    raise RepairFailed(f"reading {topic}: {error}")
        if pending:
            raise RepairFailed(
                f"reading {topic}: partitions {sorted(pending)} not read to the end in {timeout:g}s"
            )
    finally:
        consumer.close()
    return found


def append_record(
    settings: Settings,
    topic: str,
    partition: int,
    key: bytes,
    value: bytes | None,
    timeout: float,
) -> int:
    """Append (key, value) to ``topic``/``partition`` (value None: a tombstone), acknowledged
    by every in-sync replica; returns its offset.

    Raises:
        RepairFailed: the broker did not acknowledge it within ``timeout`` seconds.
    """
    config = base_config(settings, "repair")
    config.update({"enable.idempotence": True, "acks": "all"})
    producer = ck.Producer(config)
    outcome: dict[str, Any] = {}

    def delivered(error: Any, msg: Any) -> None:
        outcome["error"], outcome["offset"] = error, msg.offset()

    producer.produce(topic, value, key, partition=partition, on_delivery=delivered)
    remaining = producer.flush(timeout)
    if remaining or outcome.get("error") is not None or "offset" not in outcome:
        problem = outcome.get("error") or f"not acknowledged within {timeout:g}s"
        raise RepairFailed(f"writing to {topic}[{partition}]: {problem}")
    return int(outcome["offset"])


def _reader_config(settings: Settings) -> dict[str, Any]:
    config = base_config(settings, "repair-reader")
    config.update(
        {
            "group.id": f"{settings.application_id}-repair",  # never joined, never committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
        }
    )
    return config
