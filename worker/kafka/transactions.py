"""Exactly-once plumbing: the transactional producer and its group metadata.

Under ``exactly_once_v2`` every commit is one Kafka transaction carrying the changelog
records, the output records and the source offsets. The offsets are committed for the
group with the group member's generation, so a zombie that lost its tasks is fenced by
the broker (where the broker checks it) as well as by the ``transactional.id`` epoch.

Our group member is a kafka-python consumer, not a confluent-kafka one, so the opaque
group-metadata bytes ``send_offsets_to_transaction`` wants are built with librdkafka's
public C API (``rd_kafka_consumer_group_metadata_new_with_genid`` and ``_write``) from
the library bundled in the confluent-kafka wheel (platform-facts.md: verified to commit).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import confluent_kafka as ck

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.errors import (
    FatalError,
    GenerationMoved,
    ProducerFenced,
    RebalanceInProgress,
    TransactionAborted,
    WorkerError,
)
from worker.kafka.collector import Deliveries, RecordCollector, producer_config
from worker.kafka.error_classifier import (
    abort_can_be_retried,
    kafka_error,
    transaction_error,
    transaction_failure,
)
from worker.laps import Laps
from worker.lifecycle import StateMachine
from worker.observability import Metrics, get_logger

# A commit longer than this is logged with its parts (flush, offsets, commit).
SLOW_COMMIT_S = 0.15
# Tries of a pending abort before the producer is replaced (see ``TransactionalProducer._begin``).
MAX_PENDING_ABORTS = 5


@functools.cache
def _librdkafka() -> ctypes.CDLL:
    libs = Path(ck.__file__).parent.parent / "confluent_kafka.libs"
    candidates = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    try:
        lib = ctypes.CDLL(str(candidates[0]) if candidates else "librdkafka.so.1")
    except OSError as exc:
        raise FatalError(f"exactly_once_v2 needs librdkafka's C API: {exc}") from exc
    lib.rd_kafka_consumer_group_metadata_new_with_genid.restype = ctypes.c_void_p
    lib.rd_kafka_consumer_group_metadata_new_with_genid.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int32,
        ctypes.c_char_p,
        ctypes.c_char_p,
    ]
    lib.rd_kafka_consumer_group_metadata_write.restype = ctypes.c_void_p
    lib.rd_kafka_consumer_group_metadata_write.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.rd_kafka_consumer_group_metadata_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mem_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.rd_kafka_error_destroy.argtypes = [ctypes.c_void_p]
    return lib


def group_metadata(group_id: str, generation: int, member_id: str, instance_id: str) -> bytes:
    """The serialised consumer-group metadata of our kafka-python member, for
    ``Producer.send_offsets_to_transaction``."""
    lib = _librdkafka()
    handle = lib.rd_kafka_consumer_group_metadata_new_with_genid(
        group_id.encode(), generation, member_id.encode(), instance_id.encode() or None
    )
    if not handle:
        raise FatalError("librdkafka could not build the group metadata")
    buffer, size = ctypes.c_void_p(), ctypes.c_size_t()
    try:
        error = lib.rd_kafka_consumer_group_metadata_write(
            handle, ctypes.byref(buffer), ctypes.byref(size)
        )
        if error:
            lib.rd_kafka_error_destroy(error)
            raise FatalError("librdkafka could not serialise the group metadata")
        return ctypes.string_at(buffer, size.value)
    finally:
        if buffer:
            lib.rd_kafka_mem_free(None, buffer)
        lib.rd_kafka_consumer_group_metadata_destroy(handle)


class TxnState(enum.Enum):
    """The transactional producer's lifecycle.

    UNINITIALISED: ``init_transactions`` has not completed (a new producer, or the broker
    was away); READY: no transaction open; IN_TRANSACTION: records or offsets sent since
    ``begin_transaction``; ABORT_PENDING: an abort the broker could not take yet, retried
    before the next transaction begins.
    """

    UNINITIALISED = "uninitialised"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    ABORT_PENDING = "abort_pending"


_T = TxnState
# Any state -> UNINITIALISED: the producer is replaced.
TXN_ALLOWED: dict[TxnState, frozenset[TxnState]] = {
    _T.UNINITIALISED: frozenset({_T.READY}),
    _T.READY: frozenset({_T.IN_TRANSACTION, _T.UNINITIALISED}),
    _T.IN_TRANSACTION: frozenset({_T.READY, _T.ABORT_PENDING, _T.UNINITIALISED}),
    _T.ABORT_PENDING: frozenset({_T.READY, _T.UNINITIALISED}),
}


def exactly_once_collector(
    settings: Settings, transactional_id: str, metrics: Metrics | None = None
) -> tuple[RecordCollector, TransactionalProducer]:
    """The record collector under exactly_once_v2 and the producer it writes through:
    sink records go in the same transactions as the changelogs, so one producer carries
    both, with the whole queue."""
    deliveries = Deliveries()
    producer = TransactionalProducer(settings, transactional_id, deliveries, metrics)
    return RecordCollector(producer, producer, deliveries), producer


class TransactionalProducer:
    """A confluent-kafka producer under exactly_once_v2: everything it is handed between
    two commits is one transaction, opened lazily by the first record (or by the commit).

    It keeps the ``Producer`` API the collector calls (``produce``, ``poll``, ``flush``)
    and adds the transaction: ``commit`` flushes, checks every delivery report, adds the
    source offsets with the member's group metadata and commits; any failure aborts what
    can be aborted and raises TransactionAborted, or ProducerFenced when the producer is
    dead: it is then replaced, and the new one's ``init_transactions`` bumps the epoch,
    fencing whatever the old one might still send. The lifecycle is :class:`TxnState`
    (``transaction.transition`` at debug). Single-threaded: the processing thread.
    """

    def __init__(
        self,
        settings: Settings,
        transactional_id: str,
        deliveries: Deliveries,
        metrics: Metrics | None = None,
    ) -> None:
        # Chosen on purpose (Settings.transaction_timeout_ms_effective): it bounds how long
        # a worker that died mid-transaction holds its partitions' last stable offset.
        extra: dict[str, Any] = {
            "transactional.id": transactional_id,
            "transaction.timeout.ms": settings.transaction_timeout_ms_effective,
        }
        # librdkafka 2.16 re-bootstraps once every known broker has failed (a broker
        # outage with refused connections); a transactional producer that lived through
        # that blocked in send_offsets_to_transaction far past its timeout and never
        # recovered (tests/faults/test_broker_outage.py, exactly_once_v2 with "reset").
        # A setting given for the producer (kafka.* pass-through) still wins.
        if "metadata.recovery.strategy" not in settings.kafka_passthrough():
            extra["metadata.recovery.strategy"] = "none"
        self._config = producer_config(settings, deliveries, producers=1, extra=extra)
        self._deliveries = deliveries
        self._producer = ck.Producer(self._config)
        self._dead: TransactionAborted | None = None  # a fatal error poll() met, not raised yet
        self._pending_aborts = 0  # tries of the abort now pending (ABORT_PENDING)
        self._timeout = settings.commit_timeout_s
        self._fsm = StateMachine(
            "transaction",
            TxnState.UNINITIALISED,
            TXN_ALLOWED,
            get_logger(component="transactions", transactional_id=transactional_id),
            transitions=None if metrics is None else metrics.transaction_transitions,
            level="debug",
        )
        self._laps = Laps(
            "transaction.slow_commit",
            time.monotonic,
            SLOW_COMMIT_S,
            component="transactions",
            transactional_id=transactional_id,
        )
        self._init()

    @property
    def state(self) -> TxnState:
        return self._fsm.state

    def produce(self, *args: Any, **kwargs: Any) -> None:
        """``Producer.produce`` inside the open transaction (opening one first).

        Raises TransactionAborted when no transaction can be opened, ProducerFenced when
        the producer is dead (also when a ``poll`` found it so); BufferError and the
        record's own errors as ``ck.Producer`` does, for the collector to handle.
        """
        if self._dead is not None:
            raise self._dead
        if self._fsm.state is not TxnState.IN_TRANSACTION:
            self._begin()
        try:
            self._producer.produce(*args, **kwargs)
        except ck.KafkaException as exc:
            error = kafka_error(exc)
            if error is not None and error.fatal():
                raise ProducerFenced(f"produce: {error}") from exc
            raise

    def poll(self, timeout: float) -> int:
        """Serve delivery reports. A fatal error met here (the producer was fenced) is not
        raised into the processing loop: it is kept and raised as ProducerFenced by the
        next ``produce`` or ``commit``, whose callers abort and revive."""
        try:
            return int(self._producer.poll(timeout))
        except (ck.KafkaException, SystemError) as exc:
            self._dead = transaction_failure(exc, "poll")
            if self._dead is None:
                raise
            return 0

    def flush(self, timeout: float) -> int:
        return int(self._producer.flush(timeout))

    def _init(self) -> None:
        """``init_transactions``; one that timed out (broker away) is resumed by calling it
        again, which the next ``_begin`` does, so until then no transaction can start."""
        try:
            self._producer.init_transactions(self._timeout)
        except ck.KafkaException as exc:
            raise transaction_error(exc, "init_transactions") from exc
        self._fsm.transition(TxnState.READY, "initialised")

    def _begin(self) -> None:
        """Open a transaction, first finishing an abort the broker could not take before
        and an ``init_transactions`` that timed out. Raises TransactionAborted (the
        broker is away) or ProducerFenced."""
        if self._fsm.state is TxnState.IN_TRANSACTION:
            return
        if self._fsm.state is TxnState.ABORT_PENDING:
            # A retriable failure may never clear on this producer: a worker frozen past
            # its transaction's timeout (the broker aborted it and bumped the epoch) saw
            # its abort fail retriably on every try, for minutes, with the broker up.
            # A new producer's init_transactions aborts whatever is open whichever way.
            self._pending_aborts += 1
            if self._abort_open() == "pending" and self._pending_aborts < MAX_PENDING_ABORTS:
                raise TransactionAborted(
                    "the previous transaction is not aborted yet (broker unreachable)"
                )
            self._pending_aborts = 0
            # Aborted at last (or beyond saving): continue on a fresh producer. One that
            # lived through the outage can keep a coordinator handle from before
            # librdkafka re-bootstrapped, and then never sends the TxnOffsetCommit of its
            # next transaction (seen with librdkafka 2.16: the call blocks past its
            # timeout).
            self._replace_producer("after an abort that had to wait")
        if self._fsm.state is TxnState.UNINITIALISED:
            self._init()
        try:
            self._producer.begin_transaction()
        except ck.KafkaException as exc:
            raise transaction_error(exc, "begin_transaction") from exc
        self._fsm.transition(TxnState.IN_TRANSACTION)

    def commit(
        self,
        offsets: Mapping[TP, int],
        group_metadata: Callable[[], bytes],
        metadata: Mapping[TP, str] | None = None,
    ) -> None:
        """Commit everything produced since the last commit together with ``offsets``
        (each with its ``metadata`` string, if any: the task's stream time):

        1. open the transaction if no record did;
        2. flush, and check that every record was acknowledged;
        3. add the source offsets with the member's group metadata, taken only now, so
           that it names the newest generation the member knows (a generation that
           ended during the flush would have the offsets refused);
        4. commit the transaction.

        ``group_metadata`` raising RebalanceInProgress (the member holds no generation
        any more) aborts the transaction and raises GenerationMoved.
        """
        if not offsets and self._fsm.state is not TxnState.IN_TRANSACTION:
            return
        if self._dead is not None:
            failure, self._dead = self._dead, None
            self.abort(failure)
            raise failure
        laps = self._laps
        laps.start()
        self._begin()
        try:
            self._deliveries.check(self._producer.flush(self._timeout), self._timeout)
            laps.lap("flush")
            if offsets:
                notes = metadata or {}
                positions = [
                    ck.TopicPartition(t, p, o, notes.get((t, p), ""))
                    for (t, p), o in sorted(offsets.items())
                ]
                self._producer.send_offsets_to_transaction(
                    positions, group_metadata(), self._timeout
                )
                laps.lap("send_offsets")
            self._producer.commit_transaction(self._timeout)
            laps.lap("commit_transaction")
            laps.finish()
        except RebalanceInProgress as exc:
            moved = GenerationMoved(f"commit: {exc}")
            self.abort(moved)
            raise moved from exc
        except (ck.KafkaException, SystemError) as exc:
            client_failure = transaction_failure(exc, "commit")
            if client_failure is None:
                raise
            self.abort(client_failure)
            raise client_failure from exc
        except WorkerError as exc:  # a record was not acknowledged
            failure = TransactionAborted(f"commit: {exc}")
            self.abort(failure)
            raise failure from exc
        self._fsm.transition(TxnState.READY, "committed")

    def abort(self, cause: TransactionAborted | None = None) -> None:
        """Abort the open transaction; replace the producer if it cannot abort (fenced).

        An abort that times out (the broker is away) is retried on the same producer by
        the next ``_begin``, as librdkafka asks: replacing the producer instead would
        leave the old one's records in flight. Never raises: a new producer whose
        ``init_transactions`` cannot complete now is initialised by the next ``_begin``.
        """
        if isinstance(cause, ProducerFenced):
            self._replace_producer("fenced")
        elif self._abort_open() == "failed":
            self._replace_producer("abort failed")

    def _abort_open(self) -> Literal["done", "pending", "failed"]:
        """Abort the open (or pending) transaction: "done" (or nothing was open),
        "pending" (a retriable failure, retried by the next ``_begin``) or "failed" (the
        producer must be replaced)."""
        if self._fsm.state in (TxnState.IN_TRANSACTION, TxnState.ABORT_PENDING):
            try:
                self._producer.abort_transaction(self._timeout)
            except ck.KafkaException as exc:
                if not abort_can_be_retried(exc):
                    return "failed"
                if self._fsm.state is TxnState.IN_TRANSACTION:
                    self._fsm.transition(TxnState.ABORT_PENDING, str(exc))
                return "pending"
            # The abort purged the records still queued; their failed delivery reports
            # (_PURGE_QUEUE) are served now, so that they do not fail the next flush.
            self._producer.poll(0)
            self._fsm.transition(TxnState.READY, "aborted")
        self._deliveries.forget_failures()
        return "done"

    def _replace_producer(self, reason: str) -> None:
        """A new producer with the same transactional.id: its ``init_transactions`` bumps
        the epoch, fencing the old one and aborting its open transaction.

        The old producer's queued and in-flight records are purged first, so it never
        sends them later. Where it still can, the old producer aborts its own open
        transaction before it is replaced (see ``abort``), as librdkafka asks.
        """
        with contextlib.suppress(ck.KafkaException, RuntimeError, SystemError):
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.poll(0)
        self._deliveries.forget_failures()
        if self._fsm.state is not TxnState.UNINITIALISED:
            self._fsm.transition(TxnState.UNINITIALISED, f"producer replaced: {reason}")
        self._dead = None
        self._producer = ck.Producer(self._config)
        with contextlib.suppress(TransactionAborted):
            self._init()  # the broker is away: the next transaction's _begin tries again
