"""Exactly-once plumbing: the transactional producer's group metadata, and error classes.

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
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import confluent_kafka as ck

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.errors import FatalError, WorkerError
from worker.kafka.clients import RecordCollector


class TransactionFailed(WorkerError):
    """The transaction did not commit; its records are aborted. ``fenced``: the producer
    is dead (another instance took its transactional.id or our generation is stale)."""

    def __init__(self, message: str, fenced: bool) -> None:
        super().__init__(message)
        self.fenced = fenced


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


def classify(exc: ck.KafkaException, what: str) -> TransactionFailed:
    """Map a transactional API error to what the caller must do (the one place that reads
    librdkafka's transactional error flags)."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], ck.KafkaError) else None
    if error is None:
        return TransactionFailed(f"{what}: {exc}", fenced=True)
    fenced = bool(error.fatal()) or error.code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    )
    return TransactionFailed(f"{what}: {error}", fenced=fenced)


class TransactionalCollector(RecordCollector):
    """The record collector under exactly_once_v2: everything it sends between two commits
    is one transaction, opened lazily by the first record (or by the commit itself).

    ``commit`` flushes, adds the source offsets with the member's group metadata and
    commits; any failure aborts what can be aborted and raises :class:`TransactionFailed`.
    After a fenced failure the producer is replaced: the new one's ``init_transactions``
    bumps the epoch, fencing whatever the old one might still send.
    """

    def __init__(self, settings: Settings, transactional_id: str) -> None:
        extra = {"transactional.id": transactional_id}
        # librdkafka 2.16 re-bootstraps once every known broker has failed (a broker
        # outage with refused connections); a transactional producer that lived through
        # that blocked in send_offsets_to_transaction far past its timeout and never
        # recovered (tests/faults/test_broker_outage.py, exactly_once_v2 with "reset").
        # A setting given for the producer (kafka.* pass-through) still wins.
        if "metadata.recovery.strategy" not in settings.kafka_passthrough():
            extra["metadata.recovery.strategy"] = "none"
        super().__init__(settings, extra)
        self._timeout = settings.commit_timeout_s
        self._in_transaction = False
        self._abort_pending = False
        self._initialised = False
        self._init()

    def _init(self) -> None:
        """``init_transactions``; one that timed out (broker away) is resumed by calling it
        again, which the next ``_begin`` does, so until then no transaction can start."""
        try:
            self._producer.init_transactions(self._timeout)
        except ck.KafkaException as exc:
            raise classify(exc, "init_transactions") from exc
        self._initialised = True

    def _begin(self) -> None:
        """Open a transaction, first finishing an abort the broker could not take before
        and an ``init_transactions`` that timed out. Raises TransactionFailed."""
        if not self._in_transaction:
            if self._abort_pending:
                if self._abort_open() == "pending":
                    raise TransactionFailed(
                        "the previous transaction is not aborted yet (broker unreachable)",
                        fenced=False,
                    )
                # Aborted at last (or beyond saving): continue on a fresh producer. One
                # that lived through the outage can keep a coordinator handle from before
                # librdkafka re-bootstrapped, and then never sends the TxnOffsetCommit of
                # its next transaction (seen with librdkafka 2.16: the call blocks past
                # its timeout).
                self._replace_producer()
            if not self._initialised:
                self._init()
            try:
                self._producer.begin_transaction()
            except ck.KafkaException as exc:
                raise classify(exc, "begin_transaction") from exc
            self._in_transaction = True

    def _produce(self, *args: Any, **kwargs: Any) -> None:
        """Send inside the open transaction (opening one first). Raises TransactionFailed
        when no transaction can be opened or the producer is dead (fenced)."""
        if not self._in_transaction:
            self._begin()
        try:
            super()._produce(*args, **kwargs)
        except FatalError as exc:
            raise TransactionFailed(f"produce: {exc}", fenced=True) from exc

    def commit(self, offsets: Mapping[TP, int], group_metadata: bytes) -> None:
        """Commit everything sent since the last commit together with ``offsets``."""
        if not offsets and not self._in_transaction:
            return
        self._begin()
        try:
            self.flush(self._timeout)
            if offsets:
                positions = [ck.TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
                self._producer.send_offsets_to_transaction(positions, group_metadata, self._timeout)
            self._producer.commit_transaction(self._timeout)
        except ck.KafkaException as exc:
            failure = classify(exc, "commit")
            self.abort(failure)
            raise failure from exc
        except WorkerError as exc:  # a record was not acknowledged
            failure = TransactionFailed(f"commit: {exc}", fenced=False)
            self.abort(failure)
            raise failure from exc
        self._in_transaction = False

    def abort(self, cause: TransactionFailed | None = None) -> None:
        """Abort the open transaction; replace the producer if it cannot abort (fenced).

        An abort that times out (the broker is away) is retried on the same producer by
        the next ``_begin``, as librdkafka asks: replacing the producer instead would
        leave the old one's records in flight. Never raises: a new producer whose
        ``init_transactions`` cannot complete now is initialised by the next ``_begin``.
        """
        if (cause is None or not cause.fenced) and self._abort_open() != "failed":
            return
        self._replace_producer()

    def _abort_open(self) -> str:
        """Abort the open (or pending) transaction: "done", "pending" (a retriable failure,
        retried by the next ``_begin``) or "failed" (the producer must be replaced)."""
        if self._in_transaction or self._abort_pending:
            try:
                self._producer.abort_transaction(self._timeout)
            except ck.KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], ck.KafkaError) else None
                if error is None or error.fatal() or not error.retriable():
                    return "failed"
                self._in_transaction, self._abort_pending = False, True
                return "pending"
            # The abort purged the records still queued; their failed delivery reports
            # (_PURGE_QUEUE) are served now, so that they do not fail the next flush.
            self._producer.poll(0)
        self._in_transaction, self._abort_pending = False, False
        self._errors.clear()
        return "done"

    def _replace_producer(self) -> None:
        """A new producer with the same transactional.id: its ``init_transactions`` bumps
        the epoch, fencing the old one and aborting its open transaction.

        The old producer's queued and in-flight records are purged first, so it never
        sends them later. Where it still can, the old producer aborts its own open
        transaction before it is replaced (see ``abort``), as librdkafka asks.
        """
        with contextlib.suppress(ck.KafkaException, RuntimeError):
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.poll(0)
        self._errors.clear()
        self._in_transaction, self._abort_pending = False, False
        self._producer = ck.Producer(self._config)
        self._initialised = False
        with contextlib.suppress(TransactionFailed):
            self._init()  # the broker is away: the next transaction's _begin tries again
