"""The only confluent-kafka importer: admin, the data consumer, the restore consumer, the producer.

Every client gets ``bootstrap.servers`` plus the operator's librdkafka pass-through
settings (security, SASL, tuning). librdkafka errors are classified here and nowhere else.
All key -> partition decisions use murmur2 (``murmur2_random``), identical to Kafka's Java
clients and to ``worker.partitioner``, so a key always reaches the task owning its state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.errors import FatalError, KafkaUnavailable, ProduceFailed
from worker.kafka.client_logs import librdkafka_logger
from worker.kafka.error_classifier import (
    fetch_error,
    is_partition_eof,
    kafka_error,
    produce_error,
    rejects_record,
    topic_exists,
)

# Fetch tuning from platform-facts: the default 1000 ms queue backoff stalls a consumer
# that drains faster than the broker refills it.
_FETCH_TUNING = {"fetch.queue.backoff.ms": 10, "queued.min.messages": 100000}


def _fetch_config(settings: Settings) -> dict[str, Any]:
    """Fetch tuning plus the prefetch queue's share of ``input.buffer.max.bytes``.

    ``queued.max.messages.kbytes`` is what bounds the queue here: ``queued.min.messages``
    counts records per partition and would let 64 partitions of 1 KiB records queue 6 GB.
    """
    return {**_FETCH_TUNING, "queued.max.messages.kbytes": settings.consumer_queue_kbytes}


class RecordRejected(ValueError):
    """The producer refused one record for what it is (too large, say). Not a WorkerError:
    to the task manager it is the record's processing failure, not the worker's."""


# ``msg.error()`` called from C: scanning a batch for errors (a KafkaError is truthy)
# costs no Python bytecode per record.
_message_error = ck.Message.error


def base_config(settings: Settings, client: str) -> dict[str, Any]:
    """The settings every client of the worker shares; its log lines become structured
    events served by the client's own poll calls (see ``worker.kafka.client_logs``)."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": f"{settings.application_id}-{client}",
        "logger": librdkafka_logger(client),
    }
    config.update(settings.kafka_passthrough())
    return config


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


class PendingOffsets:
    """End offsets asked for by :meth:`Admin.request_end_offsets`, collected without waiting.

    For the processing loop, which must not block on the broker: it asks once, checks
    :meth:`ready` on later iterations, and takes :meth:`result` when it is. The futures are
    completed by librdkafka's background thread, so nothing here has to be polled.
    Thread-safety: one thread uses an instance.
    """

    def __init__(self, futures: Mapping[TP, Future[Any]]) -> None:
        self._futures = dict(futures)

    def ready(self) -> bool:
        """True once every partition has an answer or an error (or the request timed out)."""
        return all(future.done() for future in self._futures.values())

    def wait(self, timeout: float) -> dict[TP, int]:
        """Every answer that comes within ``timeout`` seconds per partition (blocking)."""
        for future in self._futures.values():
            with contextlib.suppress(ck.KafkaException, TimeoutError):
                future.result(timeout)
        return self.result()

    def result(self) -> dict[TP, int]:
        """Log-end offset of each partition answered so far; never waits.

        Partitions that failed (unknown topic, timeout) or have no answer yet are left
        out, so call it after :meth:`ready` to get everything there is to get.
        """
        found: dict[TP, int] = {}
        for tp, future in self._futures.items():
            if not future.done() or future.cancelled() or future.exception() is not None:
                continue
            offset = int(future.result().offset)
            if offset >= 0:
                found[tp] = offset
        return found


class Admin:
    """Topic metadata and idempotent creation of internal topics."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._admin = AdminClient(base_config(settings, "admin"))

    def partition_counts(self, topics: Iterable[str], timeout: float = 10.0) -> dict[str, int]:
        """Partition count of each existing topic; missing topics are absent from the result."""
        self._admin.poll(0)  # hands over the admin client's queued log lines
        try:
            metadata = self._admin.list_topics(timeout=timeout)
        except ck.KafkaException as exc:
            raise KafkaUnavailable(f"cannot read topic metadata: {exc}") from exc
        counts: dict[str, int] = {}
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                counts[topic] = len(meta.partitions)
        return counts

    def create_topics(self, specs: Sequence[TopicSpec], timeout: float = 30.0) -> list[str]:
        """Create the topics that do not exist yet; return the names created."""
        if not specs:
            return []
        new = [
            NewTopic(s.name, s.partitions, self._settings.replication_factor, config=dict(s.config))
            for s in specs
        ]
        created: list[str] = []
        for name, future in self._admin.create_topics(new, request_timeout=timeout).items():
            try:
                future.result(timeout)
                created.append(name)
            except ck.KafkaException as exc:
                if not topic_exists(exc):
                    raise FatalError(f"cannot create topic {name}: {exc.args[0]}") from exc
        return created

    def end_offsets(self, partitions: Sequence[TP], timeout: float = 5.0) -> dict[TP, int]:
        """Log-end offset (ListOffsets latest, read_uncommitted) of each partition.

        For the group leader's lag estimate. Partitions that fail (unknown topic, timeout)
        are left out rather than failing the rest. On the test broker the answer is too
        low after multi-record batches (platform-facts.md): callers must treat it as a
        lower bound. Raises KafkaUnavailable when the request cannot be made at all.
        """
        return self.request_end_offsets(partitions, timeout).wait(timeout)

    def request_end_offsets(self, partitions: Iterable[TP], timeout: float = 5.0) -> PendingOffsets:
        """Start a ListOffsets (latest, read_uncommitted) for ``partitions``; never waits.

        The non-blocking twin of :meth:`end_offsets`, for the processing loop (whether
        input waits for an active task that is not consuming yet). Every future is
        settled within ``timeout`` seconds. The test broker's answers are a lower bound
        (see :meth:`end_offsets`). Raises KafkaUnavailable when the request cannot be
        made at all.
        """
        self._admin.poll(0)  # hands over the admin client's queued log lines
        wanted = {
            ck.TopicPartition(t, p): OffsetSpec.latest() for t, p in dict.fromkeys(partitions)
        }
        if not wanted:
            return PendingOffsets({})
        try:
            futures = self._admin.list_offsets(
                wanted,
                isolation_level=ck.IsolationLevel.READ_UNCOMMITTED,
                request_timeout=timeout,
            )
        except (ck.KafkaException, ValueError, TypeError) as exc:
            raise KafkaUnavailable(f"cannot list end offsets: {exc}") from exc
        return PendingOffsets({(tp.topic, tp.partition): f for tp, f in futures.items()})


@dataclass(slots=True)
class FetchedBatch:
    """Changelog messages in fetch order, plus the partitions that reached their end (EOF).

    ``messages`` are confluent-kafka's own message objects (``topic()``, ``partition()``,
    ``offset()``, ``key()``, ``value()``), errors and EOF events already taken out. The
    restore path writes them into RocksDB batches as they are: no tuple, list or grouping
    per record in between, which cost restore a third of its time (issue 8's profile).
    """

    messages: list[Any]
    end_offsets: dict[TP, int]


class _PositionedConsumer:
    """A consumer driven by explicit positions (``incremental_assign``), never by the group."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._consumer = ck.Consumer(config)
        self._assigned: set[TP] = set()

    def add(self, positions: Mapping[TP, int | None]) -> None:
        """Start reading each partition at the given offset (None: from the beginning)."""
        parts = [
            ck.TopicPartition(t, p, ck.OFFSET_BEGINNING if off is None else off)
            for (t, p), off in positions.items()
        ]
        if parts:
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
        config.update(_fetch_config(settings))
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
    The worker keeps one for its whole run: a consumer made per call cost every
    assignment that opened tasks with local state ~0.6 s of connecting, during which no
    task processed (availability benchmark logs). Not thread-safe.
    """

    def __init__(self, settings: Settings) -> None:
        config = base_config(settings, "watermarks")
        config.update(_fetch_config(settings))
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

    def read(self, partitions: Iterable[TP], timeout: float = 10.0) -> dict[TP, int]:
        """High watermark of each partition; those that do not answer within ``timeout``
        are absent from the result."""
        wanted = set(partitions)
        if not wanted:
            return {}
        found: dict[TP, int] = {}
        self._consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_END) for t, p in sorted(wanted)])
        try:
            deadline = time.monotonic() + timeout
            while len(found) < len(wanted) and time.monotonic() < deadline:
                for msg in self._consumer.consume(10000, 0.2):
                    err = msg.error()
                    if is_partition_eof(err):
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
    never joins the group and never commits.
    """

    def __init__(self, settings: Settings) -> None:
        config = base_config(settings, "consumer")
        config.update(_fetch_config(settings))
        config.update(
            {
                "group.id": settings.application_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                # Aborted input must never be read: another app's under exactly-once, and
                # always a table load's (worker.spark loads each partition in a transaction).
                "isolation.level": "read_committed",
            }
        )
        super().__init__(config)

    def consume(self, max_records: int, timeout: float) -> list[Any]:
        """Raw confluent-kafka messages (errors already raised); the loop routes them."""
        if not self._assigned:
            return []
        messages = self._consumer.consume(max_records, timeout)
        if any(map(_message_error, messages)):
            for msg in messages:
                error = msg.error()
                if error is not None:
                    raise fetch_error(error, "source fetch")
        return messages


class RecordCollector:
    """The producers for changelogs and sinks; remembers the acked offset of each changelog.

    Two producers under at-least-once: changelog records need their acknowledged offsets,
    so each reports its delivery; sink records only need their failures known, so their
    producer reports failed deliveries only (``delivery.report.only.error``). A success
    report costs the processing thread a Python object per record and a call (issue 14:
    7% of the count-and-sum worker's time at one output per input). Each producer queues
    up to half of ``output.buffer.max.bytes``. Under exactly-once one transactional
    producer carries both, with all of it (:class:`worker.kafka.transactions.TransactionalCollector`).

    ``flush()`` returns only when every record is acknowledged and raises if any was not,
    so a commit never records an offset for data Kafka does not have.
    """

    # Sink records through a producer of their own (at-least-once; see the class doc).
    separate_sinks = True

    def __init__(self, settings: Settings, extra: Mapping[str, Any] | None = None) -> None:
        config = base_config(settings, "producer")
        config.update(
            {
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "batch.num.messages": 10000,
                "queue.buffering.max.messages": 1000000,
                # The bytes bound binds first (1 KiB records: 16 MiB is 16,000 of them);
                # a full queue makes produce() wait for acks (see _produce).
                "queue.buffering.max.kbytes": max(
                    1, settings.producer_queue_kbytes // (2 if self.separate_sinks else 1)
                ),
            }
        )
        config.update(extra or {})
        # Delivery reports of records that name no callback of their own (sink records).
        config["on_delivery"] = self._on_sink
        self._config = config
        self._errors: list[ck.KafkaError] = []
        self.acked: dict[TP, int] = {}
        # Bound once: the producer keeps a reference per record in flight.
        self._changelog_cb = self._on_changelog
        self._producer = ck.Producer(config)
        self._sink_producer = self._producer
        if self.separate_sinks:
            # Failed deliveries reported only (class doc).
            sink_config = {**config, "delivery.report.only.error": True}
            sink_config["client.id"] = f"{config['client.id']}-sink"
            self._sink_producer = ck.Producer(sink_config)

    def _on_sink(self, err: ck.KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)

    def _on_changelog(self, err: ck.KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
            return
        tp = (msg.topic(), msg.partition())
        if msg.offset() > self.acked.get(tp, -1):
            self.acked[tp] = msg.offset()

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None) -> None:
        """Write to a sink topic, partitioned by murmur2(key).

        Once per output record (issue 14): the producer is called directly with
        positional arguments, its delivery report going to the producer's default
        callback (``_on_sink``, set in the config); only a full queue or an error takes
        the general path (``_produce``), which waits for room or classifies the error.
        Nothing was queued when ``produce`` raised, so trying again there sends the record
        once. (Measured per record on this machine: 1.8 us of the processing thread with
        ``on_delivery=`` and ``headers=`` keywords, 1.25 us like this.)
        """
        producer = self._sink_producer
        try:
            if headers:
                producer.produce(topic, value, key, headers=headers)
            else:
                producer.produce(topic, value, key)  # positional: no kwargs to parse
        except (BufferError, ck.KafkaException):
            self._produce(topic, key, value, None, headers, None, producer)

    def send_changelog(
        self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes | None]]
    ) -> None:
        """Write a store's changes to its changelog partition (the task's own partition),
        in order; ``None`` values are tombstones. One call per store and commit."""
        callback = self._changelog_cb
        produce = self._producer.produce
        for key, value in records:
            try:
                produce(topic, value, key, partition, callback)  # positional, see send()
            except (BufferError, ck.KafkaException):
                self._produce(topic, key, value, partition, None, callback, self._producer)
                produce = self._producer.produce  # the general path may replace the producer

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Any,
        callback: Any,
        producer: ck.Producer,
    ) -> None:
        kwargs: dict[str, Any] = {} if callback is None else {"on_delivery": callback}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
            except ck.KafkaException as exc:
                error = kafka_error(exc)
                if error is not None and rejects_record(error):
                    # The record's own fault: the task manager retries it, then its policy.
                    raise RecordRejected(f"{topic}: {error.str()}") from exc
                raise produce_error(error, f"produce to {topic}") from exc

    def poll(self) -> None:
        self._producer.poll(0)
        if self._sink_producer is not self._producer:
            self._sink_producer.poll(0)

    def flush(self, timeout: float) -> None:
        """Wait for every ack; raise ProduceFailed (FatalError for a dead producer) if any
        record failed or is not acknowledged in time."""
        remaining = self._producer.flush(timeout)
        if self._sink_producer is not self._producer:
            remaining += self._sink_producer.flush(timeout)
        if remaining:
            raise ProduceFailed(f"{remaining} records not acknowledged within {timeout}s")
        if self._errors:
            first, self._errors = self._errors[0], []
            raise produce_error(first, "produce")

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)
        if self._sink_producer is not self._producer:
            self._sink_producer.flush(timeout)
