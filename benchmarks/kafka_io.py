"""Topics and bulk I/O for the benchmarks: creating topics, loading records fast, reading
them back, and a producer that keeps a steady rate while workers come and go.

Raw confluent-kafka clients, tuned like the baselines (``FETCH_TUNING``), so that what a
benchmark measures is the worker and not its load generator.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.harness import BenchmarkFailed
from worker.kafka.error_classifier import is_partition_eof, topic_exists

# Platform-facts fetch tuning, for every raw client of the harness and the baselines.
FETCH_TUNING: dict[str, object] = {"fetch.queue.backoff.ms": 10, "queued.min.messages": 100000}


# A Kafka record as (key, value) bytes, serialised already.
Record = tuple[bytes | None, bytes | None]


def create_topics(
    bootstrap: str, topics: Mapping[str, int], config: Mapping[str, Mapping[str, str]] | None = None
) -> None:
    """Create ``{name: partitions}``; a topic that exists already is fine."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, n, config=dict((config or {}).get(t, {}))) for t, n in topics.items()]
    for name, future in admin.create_topics(new, request_timeout=30).items():
        try:
            future.result(30)
        except ck.KafkaException as exc:
            if not topic_exists(exc):
                raise BenchmarkFailed(f"cannot create {name}: {exc.args[0]}") from exc


def bulk_producer(bootstrap: str) -> ck.Producer:
    """A producer for loading data fast: murmur2 like the worker, large batches, acks=all."""
    return ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            "queue.buffering.max.kbytes": 1048576,
        }
    )


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    producer: ck.Producer | None = None,
    flush: bool = True,
    next_offsets: dict[int, int] | None = None,
    timestamps: Iterable[int] | None = None,
) -> int:
    """Produce pre-serialised (key, value) pairs, partitioned by murmur2(key); return the count.

    ``timestamps``, when given, are the records' timestamps in ms, one per record (else
    the producer's clock).

    ``next_offsets``, when given, is updated per partition with the offset after the last
    acknowledged record. Raises BenchmarkFailed if the broker did not acknowledge every
    record (when flushing).
    """
    own = producer is None
    prod = producer or bulk_producer(bootstrap)
    failed: list[str] = []
    ends = next_offsets if next_offsets is not None else {}

    def on_delivery(err: ck.KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        elif msg.offset() >= ends.get(msg.partition(), 0):
            ends[msg.partition()] = msg.offset() + 1

    count = 0
    times = iter(timestamps) if timestamps is not None else None
    for key, value in records:
        timestamp = 0 if times is None else next(times)
        while True:
            try:
                prod.produce(topic, value, key, on_delivery=on_delivery, timestamp=timestamp)
                break
            except BufferError:
                prod.poll(0.05)
        count += 1
        if count % 10000 == 0:
            prod.poll(0)
    if flush or own:
        remaining = prod.flush(120)
        if remaining or failed:
            raise BenchmarkFailed(
                f"{topic}: {remaining} records unacknowledged, {len(failed)} failed "
                + (failed[0] if failed else "")
            )
    return count


def raw_consumer(
    bootstrap: str, group: str, extra: Mapping[str, object] | None = None
) -> ck.Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        **FETCH_TUNING,
    }
    config.update(extra or {})
    return ck.Consumer(config)


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None:
        raise BenchmarkFailed(f"{topic}: {meta.error}")
    return sorted(meta.partitions)


def read_timestamps(
    bootstrap: str, topic: str, start: Mapping[int, int] | None = None, timeout: float = 120.0
) -> dict[int, list[int]]:
    """Every record's timestamp (ms) per partition of ``topic``, from offset ``start[p]``
    (default: the beginning) to the end."""
    found: dict[int, list[int]] = {p: [] for p in partitions_of(bootstrap, topic)}
    read_topic(
        bootstrap,
        topic,
        lambda msg: found[msg.partition()].append(msg.timestamp()[1]),
        start,
        timeout,
    )
    return found


def read_topic(
    bootstrap: str,
    topic: str,
    visit: Callable[[Any], object],
    start: Mapping[int, int] | None = None,
    timeout: float = 120.0,
) -> None:
    """Call ``visit(message)`` for every record of ``topic`` from offset ``start[p]``
    (default: the beginning) to the end of each partition."""
    parts = partitions_of(bootstrap, topic)
    consumer = raw_consumer(bootstrap, f"bench-reader-{uuid.uuid4().hex[:6]}")
    begin = dict(start or {})
    try:
        consumer.assign(
            [ck.TopicPartition(topic, p, begin.get(p, ck.OFFSET_BEGINNING)) for p in parts]
        )
        pending = set(parts)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise BenchmarkFailed(f"reading {topic}: partitions {sorted(pending)} unfinished")
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is None:
                    visit(msg)
                elif is_partition_eof(err):
                    pending.discard(msg.partition())
                else:
                    raise BenchmarkFailed(f"reading {topic}: {err}")
    finally:
        consumer.close()


class SteadyProducer:
    """Produces ``rate`` records a second to ``topic`` in 100 ms ticks on a thread, until
    closed. ``records(count, start)`` makes the next ``count`` records, numbered from
    ``start`` (the number sent so far)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        records: Callable[[int, int], Iterable[Record]],
        rate: int,
    ) -> None:
        self._producer = bulk_producer(bootstrap)
        self._topic = topic
        self._records = records
        self._per_tick = max(1, rate // 10)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"produce-{topic}", daemon=True)
        self.sent = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            next_tick = time.monotonic()
            while not self._stop.is_set():
                for key, value in self._records(self._per_tick, self.sent):
                    self._producer.produce(self._topic, value, key)
                self.sent += self._per_tick
                self._producer.poll(0)
                next_tick += 0.1
                self._stop.wait(max(0.0, next_tick - time.monotonic()))  # pacing, not a condition
        except BaseException as exc:  # reported by close()
            self.error = exc

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop, flush what was produced; idempotent. Raises what the thread raised."""
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(30)
        if self.error is not None:
            error, self.error = self.error, None
            raise BenchmarkFailed(f"producer to {self._topic} failed: {error!r}")


class ArrivalWatch:
    """When each record of ``topic`` reached a ``read_committed`` consumer (epoch s), per
    partition, followed live on a thread from the beginning of the topic until closed.

    That is how exactly-once output is read: a record counts from the moment its
    transaction committed and the consumer could fetch it, not from when it was written.
    The test broker also serves an aborted transaction's records to such consumers once
    the abort is written (platform-facts.md), so a run with aborts shows them arriving.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = raw_consumer(
            bootstrap,
            f"bench-arrivals-{uuid.uuid4().hex[:6]}",
            {"isolation.level": "read_committed", "fetch.wait.max.ms": 20},
        )
        self._consumer.assign(
            [
                ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING)
                for p in partitions_of(bootstrap, topic)
            ]
        )
        self.arrivals: dict[int, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"arrivals-{topic}", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                messages = self._consumer.consume(10000, 0.05)
                now = time.time()
                for msg in messages:
                    if msg.error() is None:
                        self.arrivals.setdefault(cast(int, msg.partition()), []).append(now)
        except BaseException as exc:  # reported by close()
            self.error = exc
        finally:
            self._consumer.close()

    def start(self) -> ArrivalWatch:
        self._thread.start()
        return self

    def close(self) -> dict[int, list[float]]:
        """Stop and return the arrivals; idempotent. Raises what the thread raised."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        if self.error is not None:
            raise BenchmarkFailed(f"watching arrivals: {self.error!r}")
        return self.arrivals
