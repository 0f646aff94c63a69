"""What a plain ``read_committed`` confluent-kafka consumer sees: the judge of exactly-once on Kafka.

Unlike tests/support/transaction_log.py, which applies the transaction markers itself
because the test broker serves aborted records to ``read_committed`` readers, this module
trusts the broker and the client to hide them, as every consumer of the worker's output
does. On Kafka that is the point of the check; on the test broker it over-counts
(docs/platform-notes.md), so tests that judge with it run on Kafka.

:class:`CommittedTail` follows topics from a background thread and records when each
record became visible, for stall measurements.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import confluent_kafka as ck

from tests.support.kafka_io import fold


@dataclass(frozen=True)
class Seen:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    seen_at: float  # time.time() when this reader received it


def _consumer(bootstrap: str) -> ck.Consumer:
    return ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-committed-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 100,
        }
    )


def read_committed(
    bootstrap: str, topic: str, partitions: int, timeout: float = 60.0
) -> list[Seen]:
    """Every record of ``topic`` a ``read_committed`` consumer gets, from the start to the
    last stable offset of each partition (its partition-EOF), in offset order per partition."""
    consumer = _consumer(bootstrap)
    out: list[Seen] = []
    at_end: set[int] = set()
    try:
        consumer.assign(
            [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)]
        )
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"reading {topic}: partitions {sorted(at_end)} of {partitions} at their end after {timeout}s"
                )
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise AssertionError(f"reading {topic}: {err}")
                at_end.discard(msg.partition())
                out.append(Seen(msg.partition(), msg.offset(), msg.key(), msg.value(), time.time()))
    finally:
        consumer.close()
    return out


def committed_table(bootstrap: str, changelog: str, partitions: int) -> dict[bytes, bytes]:
    """The table a changelog holds for ``read_committed`` readers: latest value per key."""
    records = read_committed(bootstrap, changelog, partitions)
    table: dict[bytes, bytes] = {}
    for p in range(partitions):
        table.update(fold([(r.offset, r.key, r.value) for r in records if r.partition == p]))
    return table


class CommittedTail:
    """Follows ``topic`` as a ``read_committed`` consumer from its start, in a thread, noting
    when each record arrived (``seen``), until the block ends."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = _consumer(bootstrap)
        self._consumer.assign(
            [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)]
        )
        self._topic = topic
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = []
                for msg in self._consumer.consume(10000, 0.1):
                    err = msg.error()
                    if err is None:
                        batch.append(
                            Seen(msg.partition(), msg.offset(), msg.key(), msg.value(), time.time())
                        )
                    elif err.code() != ck.KafkaError._PARTITION_EOF:
                        raise AssertionError(f"tailing {self._topic}: {err}")
                with self._lock:
                    self._seen.extend(batch)
        except BaseException as exc:  # reported when the block ends
            self.error = exc
        finally:
            self._consumer.close()

    @property
    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def first_after(self, partition: int, since: float) -> float | None:
        """When the first record of ``partition`` arriving after ``since`` arrived."""
        return min(
            (s.seen_at for s in self.seen if s.partition == partition and s.seen_at > since),
            default=None,
        )

    def __enter__(self) -> CommittedTail:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
