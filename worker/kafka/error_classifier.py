"""The one place that reads librdkafka error codes and kafka-python error classes.

Each function turns a client error into the worker error that names what the caller must
do (worker/errors.py): stop (FatalError), retry later (KafkaUnavailable), reprocess
since the last commit (ProduceFailed, TransactionAborted, ProducerFenced), wait for the
rebalance (RebalanceInProgress), close dirty and rejoin (TaskMigrated), or treat the
record as the one at fault (``rejects_record``). Nothing else in the worker inspects a
client's error codes or matches error text.
"""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import kafka.errors as kerrors

from worker.errors import (
    FatalError,
    GenerationMoved,
    KafkaUnavailable,
    ProduceFailed,
    ProducerFenced,
    RebalanceInProgress,
    TaskMigrated,
    TransactionAborted,
    WorkerError,
)

# librdkafka's local errors for "no broker answered in time".
_UNREACHABLE = frozenset(
    {
        ck.KafkaError._TRANSPORT,
        ck.KafkaError._TIMED_OUT,
        ck.KafkaError._ALL_BROKERS_DOWN,
        ck.KafkaError._MSG_TIMED_OUT,
    }
)
# Errors ``produce()`` raises at once about the record itself.
_RECORD_ERRORS = frozenset(
    {ck.KafkaError.MSG_SIZE_TOO_LARGE, ck.KafkaError.INVALID_MSG_SIZE, ck.KafkaError.INVALID_RECORD}
)
_FENCED = frozenset(
    {ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH}
)
# TxnOffsetCommit refused because the generation it names is no longer the group's
# (Kafka's coordinator: ILLEGAL_GENERATION once the join phase ended, REBALANCE_IN_PROGRESS
# while completing it, UNKNOWN_MEMBER_ID when the member was removed).
_GENERATION_MOVED = frozenset(
    {
        ck.KafkaError.ILLEGAL_GENERATION,
        ck.KafkaError.REBALANCE_IN_PROGRESS,
        ck.KafkaError.UNKNOWN_MEMBER_ID,
    }
)
# kafka-python: the group went on without this member.
_MIGRATED = (
    kerrors.CommitFailedError,
    kerrors.IllegalGenerationError,
    kerrors.UnknownMemberIdError,
    kerrors.FencedInstanceIdError,
)


def kafka_error(exc: BaseException) -> ck.KafkaError | None:
    """The KafkaError a confluent-kafka exception carries, if any."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, ck.KafkaError) else None


def transaction_failure(exc: BaseException, what: str) -> TransactionAborted | None:
    """What a transactional producer's ``poll`` or ``flush`` raising ``exc`` demands, or
    None when ``exc`` is not the client's.

    A fatal error (the producer fenced: the broker aborted its transaction at
    ``transaction.timeout.ms`` and bumped its epoch) is raised by confluent-kafka 2.16 from
    the call that served it. When a delivery report of the same call is served after it,
    the report's callback runs with that exception pending, and the call raises
    SystemError instead: chaining the KafkaException ("... returned a result with an
    exception set"), or having lost it ("returned NULL without setting an exception").
    Both were seen on Kafka 4.1 with a worker resumed from SIGSTOP past its transaction
    timeout (tests/faults/test_zombie_on_kafka.py). A client whose call failed so cannot
    be trusted with the transaction: ProducerFenced, so that it is replaced.
    """
    if isinstance(exc, ck.KafkaException):
        return transaction_error(exc, what)
    if not isinstance(exc, SystemError):
        return None
    for linked in (exc.__cause__, exc.__context__):
        if isinstance(linked, ck.KafkaException):
            return transaction_error(linked, what)
    return ProducerFenced(f"{what}: the client failed while serving its callbacks: {exc}")


def produce_error(error: ck.KafkaError | None, what: str) -> WorkerError:
    """A record was not acknowledged: reprocess since the last commit, unless the
    producer is dead for good (fatal)."""
    if error is not None and error.fatal():
        return FatalError(f"{what}: {error}")
    return ProduceFailed(f"{what}: {error}")


def rejects_record(error: ck.KafkaError | None) -> bool:
    """True when ``produce()`` refused the record for what it is (too large, say)."""
    return error is not None and error.code() in _RECORD_ERRORS


def fetch_error(error: ck.KafkaError, what: str) -> WorkerError:
    """A consumer reported an error in place of a message: retry when no broker
    answered, otherwise stop (a fetch error that is not transient has no remedy here)."""
    if not error.fatal() and (error.code() in _UNREACHABLE or error.retriable()):
        return KafkaUnavailable(f"{what}: {error}")
    return FatalError(f"{what}: {error}")


def is_partition_eof(error: ck.KafkaError | None) -> bool:
    """The consumer's "reached the end of this partition" event (not a failure)."""
    return error is not None and error.code() == ck.KafkaError._PARTITION_EOF


def topic_exists(exc: ck.KafkaException) -> bool:
    """CreateTopics answered that the topic is already there (not a failure)."""
    error = kafka_error(exc)
    return error is not None and error.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS


def ends_the_client(error: Any) -> bool:
    """An error callback's error after which the client cannot go on (librdkafka retries
    transport errors itself until they surface as delivery errors)."""
    return bool(error.fatal())


def transaction_error(exc: BaseException, what: str) -> TransactionAborted:
    """A transactional call failed: its transaction is aborted. ProducerFenced when the
    producer is dead (fatal, fenced by a newer epoch, or an error we cannot read)."""
    error = kafka_error(exc)
    if error is None:
        return ProducerFenced(f"{what}: {exc}")
    if error.fatal() or error.code() in _FENCED:
        return ProducerFenced(f"{what}: {error}")
    if error.code() in _GENERATION_MOVED:
        return GenerationMoved(f"{what}: {error}")
    return TransactionAborted(f"{what}: {error}")


def abort_can_be_retried(exc: BaseException) -> bool:
    """``abort_transaction`` failed but may succeed later on the same producer (the
    broker is away); otherwise the producer must be replaced."""
    error = kafka_error(exc)
    return error is not None and not error.fatal() and bool(error.retriable())


def join_can_be_retried(exc: BaseException | None) -> bool:
    """A failed JoinGroup/SyncGroup round that the member simply starts again."""
    return isinstance(exc, kerrors.KafkaError) and bool(exc.retriable)


def group_error(exc: Exception) -> WorkerError:
    """A kafka-python group call failed.

    A rebalance in progress is not a lost generation: under the cooperative protocol the
    member keeps its tasks through it (kafka-python reports the broker's answer wrapped in
    CommitFailedError, and its own refusal to commit while joining unwrapped).
    """
    cause = exc.args[0] if isinstance(exc, kerrors.CommitFailedError) and exc.args else exc
    if isinstance(cause, kerrors.RebalanceInProgressError):
        return RebalanceInProgress(f"the group is rebalancing: {exc!r}")
    if isinstance(exc, _MIGRATED):
        return TaskMigrated(f"group membership moved on: {exc!r}")
    if isinstance(exc, kerrors.RetriableError | kerrors.KafkaConnectionError):
        return KafkaUnavailable(f"group coordinator unavailable: {exc!r}")
    return FatalError(f"group membership failed: {exc!r}")
