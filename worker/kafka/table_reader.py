"""Reading a table topic as the workers see it: the latest committed value of each key.

Runs inside Spark's Python workers (one call per Kafka partition, see
``worker.spark.datasource``) as well as in the driver, so it takes a plain librdkafka
config dict (:func:`reader_config`), which pickles. The consumer reads ``read_committed``,
as the workers do: records of an aborted or still open load transaction are never part
of the table. A null value (a tombstone) deletes its key.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

from worker.config import Settings
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import is_partition_eof
from worker.kafka.loader import LoadFailed


def reader_config(settings: Settings) -> dict[str, Any]:
    """The librdkafka config of a table reader: the operator's settings, read_committed."""
    config = base_config(settings, "table-reader")
    config.pop("logger", None)  # shipped to executors, where the worker's logging is not set up
    return config


@dataclass(slots=True)
class PartitionContent:
    """One partition's table: key -> latest value, and how many records it took to read."""

    rows: dict[bytes, bytes] = field(default_factory=dict)
    records: int = 0


def read_table_partition(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    idle_timeout: float = 60.0,
    limit: int | None = None,
) -> PartitionContent:
    """The committed content of ``topic[partition]`` from its start to its current end.

    ``limit`` stops after that many records (a sample). Raises as :func:`committed_records`.
    """
    content = PartitionContent()
    rows = content.rows
    for key, value in committed_records(
        config, topic, partition, idle_timeout=idle_timeout, limit=limit
    ):
        content.records += 1
        if key is None:  # not a table record: no key to look it up by
            continue
        if value is None:
            rows.pop(key, None)
        else:
            rows[key] = value
    return content


def committed_records(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    idle_timeout: float = 60.0,
    limit: int | None = None,
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Every committed (key, value) of ``topic[partition]``, in order, up to its current end.

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
        consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + idle_timeout
        while limit is None or read < limit:
            messages = consumer.consume(10000, 0.5)
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
                yield msg.key(), msg.value()
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
