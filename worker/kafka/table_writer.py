"""Writing serialised table records to explicit partitions: the producer behind Spark loads.

A Spark job computes each row's key and value bytes and its partition (murmur2 of the key
bytes, ``worker.partitioner``, the function the worker itself uses) and hands them to
:func:`write_transactions`: one :class:`TableWriter` per Kafka partition, a
transactional producer with ``acks=all`` and the partition's stable
:func:`transactional_id`, writing to the partition it is told, never choosing one
itself; ``None`` as a value is a delete (a tombstone on the compacted topic). A record
carries the timestamp it is given (its event time, which versioned tables and windows
read), or the time it is produced. Each partition's records commit together or not at
all.

It counts what the broker acknowledged and the transaction committed, per partition, and
nothing else: a record that failed, or was still in flight at the flush deadline, is
never counted as written. After the first failure it stops sending (the rest of the load
would only repeat the error) and aborts.

Runs inside Spark's Python workers as well as in the driver: everything it needs comes
in as a plain librdkafka config dict (:func:`writer_config`), which pickles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

from worker.config import Settings
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import ends_the_client
from worker.kafka.loader import LoadFailed

# (partition, key, value or None for a delete, timestamp in epoch ms or None for "now")
Record = tuple[int, bytes, bytes | None, int | None]
_MAX_ERRORS = 5  # error texts kept per summary: enough to diagnose, bounded in size
_POLL_EVERY = 1000  # serve delivery callbacks every this many records


def writer_config(settings: Settings, *, message_timeout_ms: int = 120_000) -> dict[str, Any]:
    """The librdkafka config of a table writer: the operator's settings plus idempotence.

    ``message_timeout_ms`` bounds how long one record may stay unacknowledged (librdkafka
    retries until then); a load against an unreachable broker fails after it.
    """
    config = base_config(settings, "table-writer")
    # Shipped to Spark executors, where the worker's logging is not set up: their
    # librdkafka lines go to the executor's stderr as librdkafka prints them.
    config.pop("logger", None)
    config.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            # Partitions are always explicit; murmur2 is set anyway so that a record
            # produced without one could never land elsewhere than the worker expects.
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "message.timeout.ms": message_timeout_ms,
        }
    )
    return config


@dataclass(frozen=True, slots=True)
class WriteSummary:
    """What one or more writers achieved. Merge summaries of several writers with ``+``."""

    acked: dict[int, int] = field(default_factory=dict)  # partition -> records acknowledged
    failed: int = 0  # records the client or the broker rejected
    unacked: int = 0  # records still unacknowledged at the flush deadline
    errors: tuple[str, ...] = ()  # the first few error texts

    @property
    def total_acked(self) -> int:
        return sum(self.acked.values())

    @property
    def ok(self) -> bool:
        return not (self.failed or self.unacked or self.errors)

    def __add__(self, other: WriteSummary) -> WriteSummary:
        acked = dict(self.acked)
        for partition, count in other.acked.items():
            acked[partition] = acked.get(partition, 0) + count
        return WriteSummary(
            acked,
            self.failed + other.failed,
            self.unacked + other.unacked,
            (self.errors + other.errors)[:_MAX_ERRORS],
        )

    def describe(self) -> str:
        """One line: acknowledged per partition, and what failed."""
        parts = " ".join(f"p{p}={n}" for p, n in sorted(self.acked.items())) or "none"
        text = f"{self.total_acked} acknowledged ({parts})"
        if not self.ok:
            text += f", {self.failed} failed, {self.unacked} unacknowledged"
            if self.errors:
                text += f" (first error: {self.errors[0]})"
        return text


class TableWriteFailed(LoadFailed):
    """Some records were not acknowledged; ``summary`` says exactly which were."""

    def __init__(self, topic: str, summary: WriteSummary) -> None:
        super().__init__(f"{topic}: {summary.describe()}")
        self.topic = topic
        self.summary = summary


class TableWriter:
    """One idempotent, acks=all producer writing records to the partitions it is given.

    With a ``transactional.id`` in the config every record goes into one transaction,
    begun here and committed by :meth:`finish` only if every record was acknowledged
    (aborted otherwise): read_committed readers then see all of it or none of it, and
    only committed records are counted as acknowledged. Starting the transaction fences
    any earlier producer with the same id (a retried Spark task, a killed load) and
    aborts what it left open.

    Not thread-safe: one owner calls :meth:`write` then :meth:`finish` once. ``finish``
    always closes the producer, whatever happened; it never raises.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        num_partitions: int,
        *,
        producer_factory: Callable[[dict[str, Any]], Any] = ck.Producer,
        init_timeout: float = 60.0,
    ) -> None:
        if num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        self.topic = topic
        self.num_partitions = num_partitions
        self._acked = [0] * num_partitions
        self._failed = 0
        self._errors: list[str] = []
        self._sent = 0
        self._closed = False
        self._producer = producer_factory({**config, "error_cb": self._on_client_error})
        self._transactional = "transactional.id" in config
        if self._transactional:
            self._producer.init_transactions(init_timeout)
            self._producer.begin_transaction()

    @property
    def failed(self) -> bool:
        """True once any record failed or the client hit a fatal error: stop writing."""
        return bool(self._errors)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self._acked[msg.partition()] += 1
        else:
            self._failed += 1
            self._note(f"delivery to {self.topic}[{msg.partition()}]: {err}")

    def _on_client_error(self, err: Any) -> None:
        # Transport errors are retried by librdkafka until message.timeout.ms and then
        # surface as delivery errors; only a fatal error ends the load by itself.
        if ends_the_client(err):
            self._note(f"fatal producer error: {err}")

    def _note(self, text: str) -> None:
        if len(self._errors) < _MAX_ERRORS:
            self._errors.append(text)

    def write(
        self, partition: int, key: bytes, value: bytes | None, timestamp: int | None = None
    ) -> bool:
        """Send one record to ``partition``, stamped ``timestamp`` (epoch ms; None: now).
        Returns False (sending nothing) after a failure.

        Raises ValueError for a partition outside the topic, a key that is not bytes or a
        timestamp that is not positive (librdkafka reads 0 as "now"): the caller computed
        them, so each is a bug, not a broker problem.
        """
        if self._errors:
            return False
        if not 0 <= partition < self.num_partitions:
            raise ValueError(f"partition {partition} outside 0..{self.num_partitions - 1}")
        if type(key) is not bytes:
            raise ValueError(f"table keys must be bytes, got {type(key).__name__}")
        stamp = {}
        if timestamp is not None:
            if timestamp <= 0:
                raise ValueError(f"record timestamps are positive epoch ms, got {timestamp}")
            stamp["timestamp"] = timestamp
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value,
                    key,
                    partition=partition,
                    on_delivery=self._on_delivery,
                    **stamp,
                )
                break
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let deliveries drain
            except ck.KafkaException as exc:
                self._failed += 1
                self._note(f"produce to {self.topic}[{partition}]: {exc.args[0]}")
                return False
        self._sent += 1
        if self._sent % _POLL_EVERY == 0:
            self._producer.poll(0)
        return not self._errors

    def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the acknowledgements, so :attr:`failed` is final."""
        if self._producer is not None and not self._errors:
            unacked = int(self._producer.flush(timeout))
            if unacked:
                self._note(f"{unacked} records not acknowledged within {timeout:.0f}s")

    def finish(self, timeout: float, *, commit: bool = True) -> WriteSummary:
        """Wait up to ``timeout`` s for every acknowledgement, close, and summarise.

        A transaction is committed if every record was acknowledged and ``commit`` holds,
        aborted otherwise.
        """
        if self._closed:
            raise RuntimeError("finish() was called already")
        self._closed = True
        unacked = 0
        try:
            unacked = int(self._producer.flush(timeout))
            if self._transactional:
                if not commit:
                    self._note("aborted: another partition written by this task failed")
                self._end_transaction(commit=not (unacked or self._errors), timeout=timeout)
        finally:
            self._producer = None
        if unacked and not self._errors:
            self._note(f"{unacked} records not acknowledged within {timeout:.0f}s")
        acked = self._acked if not (self._transactional and self._errors) else []
        return WriteSummary(
            {p: n for p, n in enumerate(acked) if n},
            self._failed,
            unacked,
            tuple(self._errors),
        )

    def _end_transaction(self, *, commit: bool, timeout: float) -> None:
        """Commit (or abort) the transaction; a failed commit is noted and aborted."""
        if commit:
            try:
                self._producer.commit_transaction(timeout)
                return
            except ck.KafkaException as exc:
                self._note(f"commit of the transaction on {self.topic}: {exc.args[0]}")
        try:
            self._producer.abort_transaction(timeout)
        except ck.KafkaException as exc:  # the broker aborts it at transaction.timeout.ms
            self._note(f"abort of the transaction on {self.topic}: {exc.args[0]}")


def transactional_id(topic: str, partition: int) -> str:
    """The one transactional id that loads write ``partition`` of table ``topic`` with.

    Stable across loads and Spark task attempts: a retried task, or a second load of the
    same table, fences the writer before it and aborts what that writer left open, so two
    writers of one partition can neither interleave nor both commit.
    """
    return f"worker-table-load.{topic}.{partition}"


def _transactional(
    config: Mapping[str, Any], topic: str, partition: int, timeout_ms: int
) -> dict[str, Any]:
    return {
        **config,
        "transactional.id": transactional_id(topic, partition),
        "transaction.timeout.ms": timeout_ms,
    }


def write_transactions(
    config: Mapping[str, Any],
    topic: str,
    num_partitions: int,
    records: Iterable[Record],
    timeout: float = 180.0,
    *,
    transaction_timeout_ms: int = 900_000,
    producer_factory: Callable[[dict[str, Any]], Any] = ck.Producer,
) -> WriteSummary:
    """Write each partition's records in one transaction of its own (see :class:`TableWriter`).

    Records may come in any order; each partition seen gets a producer with its
    :func:`transactional_id`. They commit only if every record of every partition was
    acknowledged; otherwise all of them abort. Raises TableWriteFailed (with the summary:
    what was committed) if anything was not.
    """
    writers: dict[int, TableWriter] = {}
    summary = WriteSummary()
    failed = False
    try:
        for partition, key, value, timestamp in records:
            writer = writers.get(partition)
            if writer is None:
                txn = _transactional(config, topic, partition, transaction_timeout_ms)
                writer = TableWriter(txn, topic, num_partitions, producer_factory=producer_factory)
                writers[partition] = writer
            if not writer.write(partition, key, value, timestamp):
                failed = True
                break
    except BaseException:
        failed = True  # half-written partitions must not commit
        raise
    finally:
        for writer in writers.values():
            writer.drain(timeout)  # every partition's outcome known before any commits
        failed = failed or any(w.failed for w in writers.values())
        for writer in writers.values():
            summary = summary + writer.finish(timeout, commit=not failed)
    if not summary.ok:
        raise TableWriteFailed(topic, summary)
    return summary


def fence_partitions(
    config: Mapping[str, Any],
    topic: str,
    partitions: Iterable[int],
    timeout: float = 60.0,
    *,
    transaction_timeout_ms: int = 900_000,
    producer_factory: Callable[[dict[str, Any]], Any] = ck.Producer,
) -> None:
    """Fence the load writers of ``partitions`` without writing: aborts what a killed load
    left open there, which would otherwise hold back every read_committed reader of the
    partition (the workers) until the broker's transaction timeout.

    Raises LoadFailed naming the partition whose writer could not be fenced.
    """

    def fence(partition: int) -> None:
        producer = producer_factory(
            _transactional(config, topic, partition, transaction_timeout_ms)
        )
        try:
            producer.init_transactions(timeout)
        except ck.KafkaException as exc:
            raise LoadFailed(
                f"fencing the load writer of {topic}[{partition}]: {exc.args[0]}"
            ) from None
        finally:
            producer.flush(0)

    wanted = list(partitions)
    if wanted:
        with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
            list(pool.map(fence, wanted))
