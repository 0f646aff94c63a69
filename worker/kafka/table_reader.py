"""Reading a table topic as the workers see it: the latest committed value of each key.

Runs inside Spark's Python workers (one call per Kafka partition, see
``worker.spark.datasource``) as well as in the driver, so it takes a plain librdkafka
config dict (:func:`reader_config`), which pickles. The consumer reads ``read_committed``,
as the workers do: records of an aborted or still open load transaction are never part
of the table. A null value (a tombstone) deletes its key.

A plain table's latest value of a key is its last record. A versioned table's is the
record with the largest timestamp (the last of equals), as its store keeps it: a
version loaded after a newer one (a backfill) joins the history, and the newer one
stays the latest although the older one came last (``by_time``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

from worker.config import Settings
from worker.kafka.client_config import base_config
from worker.kafka.consumers import learn_leaders
from worker.kafka.error_classifier import is_partition_eof
from worker.kafka.loader import LoadFailed


def reader_config(settings: Settings) -> dict[str, Any]:
    """The librdkafka config of a table reader: the operator's settings, read_committed."""
    config = base_config(settings, "table-reader")
    config.pop("logger", None)  # shipped to executors, where the worker's logging is not set up
    return config


@dataclass(slots=True)
class PartitionContent:
    """One partition's table: key -> latest value, the timestamp (epoch ms) of each key's
    latest record, and how many records it took to read."""

    rows: dict[bytes, bytes] = field(default_factory=dict)
    times: dict[bytes, int] = field(default_factory=dict)
    records: int = 0

    def apply(self, key: bytes | None, value: bytes | None, timestamp: int, by_time: bool) -> None:
        """Fold one record in: the key's latest unless ``by_time`` and it is older than
        the key's latest record (a tombstone's time is kept to compare with)."""
        self.records += 1
        if key is None:  # not a table record: no key to look it up by
            return
        if by_time and timestamp < self.times.get(key, timestamp):
            return  # an older version: history, not the latest
        if value is None:
            self.rows.pop(key, None)
            if not by_time:
                self.times.pop(key, None)
                return
        else:
            self.rows[key] = value
        self.times[key] = timestamp


def read_table_partition(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    idle_timeout: float = 60.0,
    limit: int | None = None,
    by_time: bool = False,
) -> PartitionContent:
    """The committed content of ``topic[partition]`` from its start to its current end.

    ``limit`` stops after that many records (a sample); ``by_time`` reads a versioned
    table (see the module doc). Raises as :func:`committed_messages`.
    """
    content = PartitionContent()
    for key, value, timestamp in committed_messages(
        config, topic, partition, idle_timeout=idle_timeout, limit=limit
    ):
        content.apply(key, value, timestamp, by_time)
    return content


def committed_messages(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    idle_timeout: float = 60.0,
    limit: int | None = None,
) -> Iterator[tuple[bytes | None, bytes | None, int]]:
    """Every committed (key, value, timestamp in epoch ms) of ``topic[partition]``, in
    order, up to its current end.

    Raises LoadFailed if the broker reports an error, or nothing arrives for
    ``idle_timeout`` seconds before the end.
    """
    consumer = ck.Consumer(
        {
            **config,
            "group.id": "worker-table-reader",  # never joined, never committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
            # The end shows as an empty fetch, which the broker would hold this long.
            "fetch.wait.max.ms": 50,
        }
    )
    read = 0
    try:
        learn_leaders(consumer, topic, min(idle_timeout, 10.0))
        consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + idle_timeout
        while limit is None or read < limit:
            # consume() returns when its batch is full or its wait is over: the end comes
            # as one event after the last records, so a long wait only delays it.
            messages = consumer.consume(10000, 0.05)
            if not messages and time.monotonic() > deadline:
                raise LoadFailed(
                    f"reading {topic}[{partition}]: nothing arrived for {idle_timeout:.0f}s"
                    f" after {read} records; is the broker reachable?"
                )
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if is_partition_eof(err):
                        return
                    raise LoadFailed(f"reading {topic}[{partition}]: {err}")
                read += 1
                yield msg.key(), msg.value(), msg.timestamp()[1]
            if messages:
                deadline = time.monotonic() + idle_timeout
    finally:
        consumer.close()


def partition_count(config: Mapping[str, Any], topic: str, timeout: float = 10.0) -> int | None:
    """The topic's partition count, None if it does not exist.

    Raises LoadFailed when the broker does not answer within ``timeout``.
    """
    consumer = ck.Consumer({**config, "group.id": "worker-table-reader"})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
    except ck.KafkaException as exc:
        raise LoadFailed(f"cannot reach the broker to look up {topic}: {exc.args[0]}") from None
    finally:
        consumer.close()
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        return None
    return len(found.partitions)
