"""Client errors classified by the action they demand (worker/kafka/error_classifier.py)."""

from __future__ import annotations

import confluent_kafka as ck
import kafka.errors as kerrors
import pytest

from worker.errors import (
    FatalError,
    KafkaUnavailable,
    ProduceFailed,
    ProducerFenced,
    RebalanceInProgress,
    TaskMigrated,
    TransactionAborted,
)
from worker.kafka.error_classifier import (
    abort_can_be_retried,
    fetch_error,
    group_error,
    is_partition_eof,
    produce_error,
    rejects_record,
    topic_exists,
    transaction_error,
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (kerrors.CommitFailedError(), TaskMigrated),
        (kerrors.IllegalGenerationError(), TaskMigrated),
        (kerrors.UnknownMemberIdError(), TaskMigrated),
        (kerrors.KafkaTimeoutError(), KafkaUnavailable),
        (kerrors.CoordinatorNotAvailableError(), KafkaUnavailable),
        (kerrors.NotCoordinatorError(), KafkaUnavailable),
        (kerrors.KafkaConnectionError(), KafkaUnavailable),
        (kerrors.GroupAuthorizationFailedError(), FatalError),
    ],
)
def test_kafka_python_errors_are_classified_by_what_the_caller_must_do(
    error: Exception, expected: type[Exception]
) -> None:
    assert type(group_error(error)) is expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (kerrors.RebalanceInProgressError(), RebalanceInProgress),
        (kerrors.CommitFailedError(kerrors.RebalanceInProgressError()), RebalanceInProgress),
        (kerrors.CommitFailedError(kerrors.IllegalGenerationError()), TaskMigrated),
        (kerrors.CommitFailedError(kerrors.UnknownMemberIdError()), TaskMigrated),
        (kerrors.IllegalGenerationError(), TaskMigrated),
        (kerrors.CoordinatorNotAvailableError(), KafkaUnavailable),
    ],
)
def test_a_rebalance_in_progress_is_told_apart_from_a_lost_generation(
    error: Exception, expected: type[Exception]
) -> None:
    assert type(group_error(error)) is expected


def error(code: int, *, fatal: bool = False, retriable: bool = False) -> ck.KafkaError:
    return ck.KafkaError(code, "test", fatal=fatal, retriable=retriable)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ck.KafkaException(error(ck.KafkaError._FENCED, fatal=True)), ProducerFenced),
        (ck.KafkaException(error(ck.KafkaError.PRODUCER_FENCED)), ProducerFenced),
        (ck.KafkaException(error(ck.KafkaError.INVALID_PRODUCER_EPOCH)), ProducerFenced),
        (ck.KafkaException(error(ck.KafkaError._TIMED_OUT, retriable=True)), TransactionAborted),
        (ck.KafkaException("no KafkaError inside"), ProducerFenced),
    ],
)
def test_a_failed_transactional_call_aborts_and_a_dead_producer_is_told_apart(
    exc: ck.KafkaException, expected: type[Exception]
) -> None:
    assert type(transaction_error(exc, "commit")) is expected


def test_an_abort_is_retried_on_the_same_producer_only_when_the_error_is_retriable() -> None:
    assert abort_can_be_retried(ck.KafkaException(error(ck.KafkaError._TIMED_OUT, retriable=True)))
    assert not abort_can_be_retried(ck.KafkaException(error(ck.KafkaError._TIMED_OUT)))
    assert not abort_can_be_retried(
        ck.KafkaException(error(ck.KafkaError._FENCED, fatal=True, retriable=True))
    )


def test_a_failed_delivery_means_reprocessing_unless_the_producer_is_dead() -> None:
    assert type(produce_error(error(ck.KafkaError._MSG_TIMED_OUT), "produce")) is ProduceFailed
    assert type(produce_error(error(ck.KafkaError._TRANSPORT), "produce")) is ProduceFailed
    assert type(produce_error(None, "produce")) is ProduceFailed
    assert type(produce_error(error(ck.KafkaError._FENCED, fatal=True), "produce")) is FatalError


def test_only_errors_about_the_record_itself_blame_the_record() -> None:
    assert rejects_record(error(ck.KafkaError.MSG_SIZE_TOO_LARGE))
    assert rejects_record(error(ck.KafkaError.INVALID_RECORD))
    assert not rejects_record(error(ck.KafkaError._TRANSPORT))
    assert not rejects_record(None)


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (error(ck.KafkaError._TRANSPORT), KafkaUnavailable),
        (error(ck.KafkaError._ALL_BROKERS_DOWN), KafkaUnavailable),
        (error(ck.KafkaError.NOT_LEADER_FOR_PARTITION, retriable=True), KafkaUnavailable),
        (error(ck.KafkaError.TOPIC_AUTHORIZATION_FAILED), FatalError),
        (error(ck.KafkaError._TRANSPORT, fatal=True), FatalError),
    ],
)
def test_a_fetch_error_is_retried_when_transient_and_fatal_otherwise(
    err: ck.KafkaError, expected: type[Exception]
) -> None:
    classified = fetch_error(err, "source fetch")
    assert type(classified) is expected
    assert str(classified).startswith("source fetch: ")


def test_end_of_partition_and_existing_topics_are_not_failures() -> None:
    assert is_partition_eof(error(ck.KafkaError._PARTITION_EOF))
    assert not is_partition_eof(error(ck.KafkaError._TRANSPORT))
    assert not is_partition_eof(None)
    assert topic_exists(ck.KafkaException(error(ck.KafkaError.TOPIC_ALREADY_EXISTS)))
    assert not topic_exists(ck.KafkaException(error(ck.KafkaError.TOPIC_AUTHORIZATION_FAILED)))
