"""The group's committed offsets, as the group member commits and reads them.

At-least-once commits go through the group member (:class:`worker.kafka.membership.
GroupMember`) so that the broker fences them with the member's generation; reading them
back uses one OffsetFetch for any number of partitions. Both translate kafka-python's
errors by the action they demand (:func:`worker.kafka.error_classifier.group_error`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import kafka.errors as kerrors
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition

from worker.assignment.task_id import TP
from worker.kafka import group_coordinator
from worker.kafka.error_classifier import group_error


def commit(
    consumer: KafkaConsumer,
    offsets: Mapping[TP, int],
    metadata: Mapping[TP, str],
    timeout_ms: int | None,
) -> None:
    """Synchronously commit next-offsets-to-consume, each with its metadata string ('' for
    none). Raises TaskMigrated, KafkaUnavailable or FatalError (``group_error``)."""
    request = {
        TopicPartition(t, p): OffsetAndMetadata(o, metadata.get((t, p), ""), -1)
        for (t, p), o in offsets.items()
    }
    try:
        consumer.commit(request, timeout_ms=timeout_ms)
    except kerrors.KafkaError as exc:
        raise group_error(exc) from exc


def committed_with_metadata(
    consumer: KafkaConsumer, partitions: Iterable[TP], timeout_ms: int | None
) -> dict[TP, tuple[int | None, str]]:
    """The committed offsets (None where nothing was committed) and their metadata strings
    ('' where none), in one request.

    Waits at most ``timeout_ms`` (default: the request timeout), then raises
    KafkaUnavailable; kafka-python alone would retry forever without a timeout.
    """
    wanted = [TopicPartition(t, p) for t, p in partitions]
    if not wanted:
        return {}
    if timeout_ms is None:
        timeout_ms = int(consumer.config["request_timeout_ms"])
    try:
        found = group_coordinator.fetch_committed(consumer, wanted, timeout_ms)
    except kerrors.KafkaError as exc:
        raise group_error(exc) from exc
    result: dict[TP, tuple[int | None, str]] = {}
    for tp in wanted:
        meta = found.get(tp)
        offset = meta.offset if meta and meta.offset >= 0 else None
        result[(tp.topic, tp.partition)] = (offset, _metadata_text(meta.metadata if meta else None))
    return result


def _metadata_text(raw: str | None) -> str:
    """The metadata string as it was committed.

    Exactly-once commits go through confluent-kafka's ``send_offsets_to_transaction``,
    whose ``TopicPartition`` hands librdkafka the metadata with C's terminating NUL
    counted in its size, so Kafka stores and returns ``"...\x00"``; kafka-python passes
    that on as read, and a stream time read back with it did not decode (seen on Kafka
    4.1: a task without a changelog resumed at its first record's time instead of the
    committed stream time; tests/integration/test_kafka_assumptions.py). The test broker
    drops metadata altogether (docs/platform-notes.md).
    """
    return (raw or "").rstrip("\x00")
