"""The consumers that read by explicit position: source data, changelogs, watermarks.

None of them joins the group or commits: membership and offset commits belong to the
kafka-python member (``worker.kafka.membership``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, filterfalse
from typing import Any, cast

import confluent_kafka as ck

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.kafka.client_config import base_config, fetch_config
from worker.kafka.error_classifier import fetch_error, is_partition_eof

# ``msg.error()`` called from C: scanning a batch for errors (a KafkaError is truthy)
# costs no Python bytecode per record.
_message_error = ck.Message.error

# How long an assignment waits for a new topic's metadata before leaving it to
# librdkafka's own topic scan (a round trip on a healthy cluster).
_METADATA_TIMEOUT_S = 2.0


@dataclass(slots=True)
class FetchedBatch:
    """Changelog messages in fetch order, plus the partitions that reached their end (EOF).

    ``messages`` are confluent-kafka's own message objects (``topic()``, ``partition()``,
    ``offset()``, ``key()``, ``value()``), errors and EOF events already taken out. The
    restore path writes them into RocksDB batches as they are: no tuple, list or grouping
    per record in between, which the restore profile showed to be a large part of its
    time (docs/operations.md, "Measurements behind the Kafka adapters").
    """

    messages: list[Any]
    end_offsets: dict[TP, int]


def learn_leaders(consumer: ck.Consumer, topic: str, timeout: float = _METADATA_TIMEOUT_S) -> bool:
    """Ask for ``topic``'s metadata before its partitions are assigned, so they start with
    their leader known; False if the request failed (librdkafka's scan still runs).

    librdkafka learns where a newly assigned topic's partitions lead only on its
    1-second topic scan, so their first fetch waited 0-1 s (debug log: ``Start
    consuming`` then ``Topic ... metadata information unknown`` up to 1 s later): a
    moved task's new owner, just started, read the old owner's release up to a second
    late. Asked after the assignment, the answer delegates the partitions at once, but
    one assigned at a logical offset (end, beginning) has by then found no leader and
    waits for librdkafka's offset query retry, 500 ms later (debug log: ``no current
    leader for partition: (re)starting offset query timer``): a watermark read of a
    changelog took 0.5 s on Apache Kafka, an empty partition's table read 1 s
    (docs/platform-notes.md).
    """
    try:
        consumer.list_topics(topic, timeout=timeout)
    except ck.KafkaException:
        return False
    return True


class _TopicMetadata:
    """Asks for the metadata of topics a consumer has never read, before it assigns them
    (:func:`learn_leaders`)."""

    def __init__(self, consumer: ck.Consumer) -> None:
        self._consumer = consumer
        self._known: set[str] = set()

    def learn(self, topics: Iterable[str]) -> None:
        for topic in sorted(set(topics) - self._known):
            if learn_leaders(self._consumer, topic):
                self._known.add(topic)


class _PositionedConsumer:
    """A consumer driven by explicit positions (``incremental_assign``), never by the group."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._consumer = ck.Consumer(config)
        self._assigned: set[TP] = set()
        self._topics = _TopicMetadata(self._consumer)

    def add(self, positions: Mapping[TP, int | None]) -> None:
        """Start reading each partition at the given offset (None: from the beginning)."""
        parts = [
            ck.TopicPartition(t, p, ck.OFFSET_BEGINNING if off is None else off)
            for (t, p), off in positions.items()
        ]
        if parts:
            self._topics.learn({t for t, _p in positions})
            self._consumer.incremental_assign(parts)
            # A partition paused before it was last unassigned can come back paused:
            # librdkafka keeps the flag on the partition object. A new assignment starts
            # fetching, always.
            self._consumer.resume(parts)
            self._assigned.update(positions)

    def remove(self, partitions: Iterable[TP]) -> None:
        parts = [ck.TopicPartition(t, p) for t, p in partitions if (t, p) in self._assigned]
        if parts:
            self._consumer.incremental_unassign(parts)
            self._assigned.difference_update((tp.topic, tp.partition) for tp in parts)

    @property
    def assigned(self) -> frozenset[TP]:
        return frozenset(self._assigned)

    def pause(self, partitions: Iterable[TP]) -> None:
        """Stop fetching these partitions (their positions are kept)."""
        parts = [ck.TopicPartition(t, p) for t, p in partitions if (t, p) in self._assigned]
        if parts:
            self._consumer.pause(parts)

    def resume(self, partitions: Iterable[TP]) -> None:
        parts = [ck.TopicPartition(t, p) for t, p in partitions if (t, p) in self._assigned]
        if parts:
            self._consumer.resume(parts)

    def high_watermark(self, partition: TP) -> int | None:
        """The end of ``partition`` as the last fetch response reported it (no request).

        The fetch path's high watermark is right on every broker, unlike ListOffsets on
        the test broker (platform-facts.md). None until a fetch has reported it.
        """
        try:
            _low, high = self._consumer.get_watermark_offsets(
                ck.TopicPartition(*partition), cached=True
            )
        except ck.KafkaException:
            return None
        return None if high is None or high < 0 else int(high)

    def close(self) -> None:
        self._consumer.close()


RESTORE_FETCH_WAIT_MS = 100


class RestoreConsumer(_PositionedConsumer):
    """A group-less consumer reading changelogs by explicit position (restores, standbys)."""

    def __init__(self, settings: Settings) -> None:
        config = base_config(settings, "restore-consumer")
        config.update(fetch_config(settings))
        config.update(
            {
                # librdkafka requires a group id even for assign(); nothing is ever committed.
                "group.id": f"{settings.application_id}-restore",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        # A restore learns that it reached the end from a fetch that came back empty,
        # which the broker holds for fetch.wait.max.ms (librdkafka: 500 ms): a task with
        # nothing to restore waited that long, on every restart. Standbys at their end
        # poll this often instead; a user's own setting wins.
        config.setdefault("fetch.wait.max.ms", RESTORE_FETCH_WAIT_MS)
        super().__init__(config)

    def fetch(self, max_records: int, timeout: float) -> FetchedBatch:
        """Up to ``max_records`` changelog messages; EOF events carry the high watermark.

        Errors are rare (an EOF per partition that reaches its end), so the batch is
        scanned for them once and copied without them only when there are some.
        """
        if not self._assigned:
            return FetchedBatch([], {})
        messages: list[Any] = self._consumer.consume(max_records, timeout)
        ends: dict[TP, int] = {}
        if any(map(_message_error, messages)):
            for msg in messages:
                err = msg.error()
                if err is None:
                    continue
                if is_partition_eof(err):
                    ends[(msg.topic(), msg.partition())] = msg.offset()
                else:
                    raise fetch_error(err, "changelog fetch")
            messages = [msg for msg in messages if msg.error() is None]
        return FetchedBatch(messages, ends)


class WatermarkReader:
    """The end of partitions as the fetch path reports it, over one long-lived consumer.

    Each partition is positioned at its logical end and fetched once; the partition-EOF
    event carries the high watermark. Unlike ListOffsets alone this is right on the test
    broker too (platform-facts.md), and it reads at most the tail the broker under-reports.
    The worker keeps one for its whole run: a consumer made per call made every
    assignment that opened tasks with local state wait for it to connect, during which no
    task processed (docs/operations.md, "Measurements behind the Kafka adapters").
    Not thread-safe.
    """

    def __init__(self, settings: Settings) -> None:
        config = base_config(settings, "watermarks")
        config.update(fetch_config(settings))
        config.update(
            {
                "group.id": f"{settings.application_id}-watermarks",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "latest",
                # One empty fetch at the end is the answer: do not let the broker hold it
                # (start-up waits on this before the group join).
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer = ck.Consumer(config)
        self._topics = _TopicMetadata(self._consumer)

    def read(self, partitions: Iterable[TP], timeout: float = 10.0) -> dict[TP, int]:
        """High watermark of each partition; those that do not answer within ``timeout``
        are absent from the result.

        The processing thread waits for this (an assignment that opens tasks with local
        state), so it returns as soon as the last partition reported its end: each poll
        returns on the first event, where a batch ``consume`` held every read for its
        whole timeout (docs/platform-notes.md).
        """
        wanted = set(partitions)
        if not wanted:
            return {}
        found: dict[TP, int] = {}
        self._topics.learn({t for t, _p in wanted})
        self._consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_END) for t, p in sorted(wanted)])
        try:
            deadline = time.monotonic() + timeout
            while len(found) < len(wanted) and (left := deadline - time.monotonic()) > 0:
                msg = self._consumer.poll(left)
                if msg is not None and is_partition_eof(msg.error()):
                    found[cast(TP, (msg.topic(), msg.partition()))] = cast(int, msg.offset())
        finally:
            self._consumer.unassign()
        return found

    def close(self) -> None:
        self._consumer.close()


def fetch_high_watermarks(
    settings: Settings, partitions: Iterable[TP], timeout: float = 10.0
) -> dict[TP, int]:
    """:meth:`WatermarkReader.read` over a consumer made for this one call."""
    reader = WatermarkReader(settings)
    try:
        return reader.read(partitions, timeout)
    finally:
        reader.close()


class DataConsumer(_PositionedConsumer):
    """Reads the active tasks' source partitions from explicit positions.

    Group membership and offset commits belong to the kafka-python member; this consumer
    never joins the group and never commits. It reports where a partition's fetch
    reached its end (:meth:`take_ends`): a task that reads several partitions waits for
    an empty one only while it is not at its end (``worker.tasks.partition_group``).
    """

    def __init__(self, settings: Settings) -> None:
        config = base_config(settings, "consumer")
        config.update(fetch_config(settings))
        config.update(
            {
                "group.id": settings.application_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                # Aborted input must never be read: another app's under exactly-once, and
                # always a table load's (worker.spark loads each partition in a transaction).
                "isolation.level": "read_committed",
                # The end of a partition, as the fetch reached it (the last stable offset
                # under read_committed, past any transaction marker): the lag is 0.
                "enable.partition.eof": True,
            }
        )
        super().__init__(config)
        self._ends: dict[TP, int] = {}

    def consume(self, max_records: int, timeout: float) -> list[Any]:
        """Raw confluent-kafka messages (errors raised, ends taken out); the loop routes them.

        A batch holds an end event only when a partition's fetch caught up, so it is
        copied without them only then, in C (``filterfalse``), as are the events picked.
        """
        if not self._assigned:
            return []
        messages = self._consumer.consume(max_records, timeout)
        if any(map(_message_error, messages)):
            for msg in compress(messages, map(_message_error, messages)):
                error = cast(ck.KafkaError, msg.error())
                if not is_partition_eof(error):
                    raise fetch_error(error, "source fetch")
                self._ends[cast(TP, (msg.topic(), msg.partition()))] = cast(int, msg.offset())
            messages = list(filterfalse(_message_error, messages))
        return messages

    def take_ends(self) -> dict[TP, int]:
        """Each partition whose fetch reached its end since the last call, and the offset
        there (the next one it will have)."""
        ends, self._ends = self._ends, {}
        return ends

    def add(self, positions: Mapping[TP, int | None]) -> None:
        for tp in positions:
            self._ends.pop(tp, None)
        super().add(positions)

    def remove(self, partitions: Iterable[TP]) -> None:
        partitions = list(partitions)
        for tp in partitions:
            self._ends.pop(tp, None)
        super().remove(partitions)
