"""The record collector: what the tasks produce, written through one or two producers.

The collector does not know the processing guarantee. It is given the producer for
changelog records and the one for sink records (the same object under exactly-once) and
a :class:`Deliveries` book their delivery reports go to. Under at-least-once they are
two plain confluent-kafka producers (:func:`at_least_once_collector`); under
exactly-once both are one :class:`worker.kafka.transactions.TransactionalProducer`,
which opens a transaction before the first record it is handed. All key -> partition
decisions use murmur2 (``murmur2_random``), identical to Kafka's Java clients and to
``worker.partitioner``, so a key always reaches the task owning its state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import confluent_kafka as ck

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.errors import ProduceFailed
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import kafka_error, produce_error, rejects_record


class RecordRejected(ValueError):
    """The producer refused one record for what it is (too large, say). Not a WorkerError:
    to the task manager it is the record's processing failure, not the worker's."""


class Producer(Protocol):
    """What the collector calls on a producer: confluent-kafka's ``Producer`` API, which a
    transactional producer keeps (``produce`` arguments as ``ck.Producer.produce``)."""

    def produce(self, *args: Any, **kwargs: Any) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...


class Deliveries:
    """The delivery reports of the records in flight: the acknowledged offset of each
    changelog partition, and the failures not yet raised.

    ``acked`` is one dict for the collector's whole life (tasks keep reading it).
    Thread-safety: reports are served by the producers' ``poll``/``flush``, which run on
    the processing thread.
    """

    def __init__(self) -> None:
        self.acked: dict[TP, int] = {}
        self._failures: list[ck.KafkaError] = []

    def on_sink(self, err: ck.KafkaError | None, msg: Any) -> None:
        """Default delivery report: records that name no callback (sink records)."""
        if err is not None:
            self._failures.append(err)

    def on_changelog(self, err: ck.KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._failures.append(err)
            return
        tp = (msg.topic(), msg.partition())
        if msg.offset() > self.acked.get(tp, -1):
            self.acked[tp] = msg.offset()

    def check(self, unacknowledged: int, timeout: float) -> None:
        """After a flush: raise ProduceFailed (FatalError for a dead producer) if records
        are still unacknowledged or any delivery failed since the last check."""
        if unacknowledged:
            raise ProduceFailed(f"{unacknowledged} records not acknowledged within {timeout}s")
        if self._failures:
            first, self._failures = self._failures[0], []
            raise produce_error(first, "produce")

    def forget_failures(self) -> None:
        """Drop the failures of records that no longer count (an aborted transaction's)."""
        self._failures.clear()


def producer_config(
    settings: Settings, deliveries: Deliveries, producers: int, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """An idempotent murmur2 producer's settings, reporting to ``deliveries``, with its
    share (one of ``producers``) of ``output.buffer.max.bytes``; ``extra`` wins."""
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
            # a full queue makes produce() wait for acks (see RecordCollector._produce).
            "queue.buffering.max.kbytes": max(1, settings.producer_queue_kbytes // producers),
        }
    )
    config.update(extra)
    # Delivery reports of records that name no callback of their own (sink records).
    config["on_delivery"] = deliveries.on_sink
    return config


def at_least_once_collector(settings: Settings) -> RecordCollector:
    """Two producers, each with half the queue: changelog records need their acknowledged
    offsets, so each reports its delivery; sink records only need their failures known,
    so their producer reports failed deliveries only (``delivery.report.only.error``): a
    success report costs the processing thread a Python object and a call per record
    (docs/operations.md, "Measurements behind the Kafka adapters")."""
    deliveries = Deliveries()
    config = producer_config(settings, deliveries, producers=2, extra={})
    sink_config = {**config, "delivery.report.only.error": True}
    sink_config["client.id"] = f"{config['client.id']}-sink"
    return RecordCollector(ck.Producer(config), ck.Producer(sink_config), deliveries)


class RecordCollector:
    """Writes sink and changelog records; remembers the acked offset of each changelog.

    ``flush()`` returns only when every record is acknowledged and raises if any was not,
    so a commit never records an offset for data Kafka does not have. Errors a producer
    raises on ``produce`` are classified here; a transactional producer raises its own
    (TransactionAborted, ProducerFenced) before they reach the collector.
    """

    def __init__(self, changelogs: Producer, sinks: Producer, deliveries: Deliveries) -> None:
        self._changelogs = changelogs
        self._sinks = sinks
        self._deliveries = deliveries
        self.acked = deliveries.acked
        # Bound once: the producer keeps a reference per record in flight.
        self._changelog_cb = deliveries.on_changelog
        self._producers: tuple[Producer, ...] = (
            (changelogs,) if sinks is changelogs else (changelogs, sinks)
        )

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """Write to a sink topic, partitioned by murmur2(key), with ``timestamp`` (ms; 0
        lets the producer stamp it with its clock) and ``headers`` (None: none).

        Once per output record: the producer is called directly with positional
        arguments, its delivery report going to the producer's default callback
        (``Deliveries.on_sink``, set in the config); only a full queue or an error takes
        the general path (``_produce``), which waits for room or classifies the error.
        Nothing was queued when ``produce`` raised, so trying again there sends the record
        once. Keyword arguments cost measurably per record (docs/operations.md,
        "Measurements behind the Kafka adapters").
        """
        producer = self._sinks
        try:
            # Positional (no kwargs to parse): topic, value, key, partition (-1: the
            # partitioner's choice), callback, on_delivery (None: the default), timestamp,
            # headers.
            producer.produce(topic, value, key, -1, None, None, timestamp, headers)
        except (BufferError, ck.KafkaException):
            self._produce(producer, topic, key, value, None, timestamp, headers, None)

    def send_changelog(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        times: Mapping[bytes, int] | None = None,
    ) -> None:
        """Write a store's changes to its changelog partition (the task's own partition),
        in order; ``None`` values are tombstones. Each record carries the time of its
        write from ``times`` (0, the producer's clock, where it has none). One call per
        store and commit."""
        callback = self._changelog_cb
        produce = self._changelogs.produce
        stamps = times or {}
        for key, value in records:
            stamp = stamps.get(key, 0)
            if stamp < 0:
                stamp = 0
            try:
                # Positional, see send().
                produce(topic, value, key, partition, callback, None, stamp)
            except (BufferError, ck.KafkaException):
                self._produce(self._changelogs, topic, key, value, partition, stamp, None, callback)

    def send_marker(
        self,
        topic: str,
        partition: int,
        key: bytes,
        headers: list[tuple[str, bytes]],
        timestamp: int = 0,
    ) -> None:
        """Write a tombstone with headers to a changelog partition after the store's
        changes (a release marker, worker/state/release_marker.py); acknowledged like them.
        ``timestamp`` 0: the producer's clock."""
        self._produce(
            self._changelogs, topic, key, None, partition, timestamp, headers, self._changelog_cb
        )

    def _produce(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: int,
        headers: Any,
        callback: Any,
    ) -> None:
        kwargs: dict[str, Any] = {} if callback is None else {"on_delivery": callback}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp > 0:
            kwargs["timestamp"] = timestamp
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
        for producer in self._producers:
            producer.poll(0)

    def flush(self, timeout: float) -> None:
        """Wait for every ack; raise ProduceFailed (FatalError for a dead producer) if any
        record failed or is not acknowledged in time."""
        remaining = sum(producer.flush(timeout) for producer in self._producers)
        self._deliveries.check(remaining, timeout)

    def close(self, timeout: float = 10.0) -> None:
        for producer in self._producers:
            producer.flush(timeout)
