"""Client errors classified by the action they demand (worker/kafka/error_classifier.py)."""

from __future__ import annotations

import pickle

import confluent_kafka as ck
import kafka.errors as kerrors
import pytest

from worker.errors import (
    BrokerAccessDenied,
    FatalError,
    KafkaUnavailable,
    ProduceFailed,
    ProducerFenced,
    RebalanceInProgress,
    TaskMigrated,
    TransactionAborted,
)
from worker.kafka.broker_access import BROKER_ACCESS, BrokerAccess
from worker.kafka.error_classifier import (
    abort_can_be_retried,
    denies_access,
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
        (kerrors.GroupAuthorizationFailedError(), BrokerAccessDenied),
        (kerrors.SaslAuthenticationFailedError(), BrokerAccessDenied),
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
        (error(ck.KafkaError.TOPIC_AUTHORIZATION_FAILED), BrokerAccessDenied),
        (error(ck.KafkaError._TRANSPORT, fatal=True), FatalError),
    ],
)
def test_a_fetch_error_is_retried_when_transient_and_fatal_otherwise(
    err: ck.KafkaError, expected: type[Exception]
) -> None:
    classified = fetch_error(err, "source fetch")
    assert type(classified) is expected
    assert "source fetch: " in str(classified)


def test_end_of_partition_and_existing_topics_are_not_failures() -> None:
    assert is_partition_eof(error(ck.KafkaError._PARTITION_EOF))
    assert not is_partition_eof(error(ck.KafkaError._TRANSPORT))
    assert not is_partition_eof(None)
    assert topic_exists(ck.KafkaException(error(ck.KafkaError.TOPIC_ALREADY_EXISTS)))
    assert not topic_exists(ck.KafkaException(error(ck.KafkaError.TOPIC_AUTHORIZATION_FAILED)))


ACCESS_REFUSALS = [
    ck.KafkaError._AUTHENTICATION,  # a failed SASL handshake (librdkafka -169)
    ck.KafkaError._SSL,  # a TLS handshake that failed: an untrusted certificate
    ck.KafkaError.SASL_AUTHENTICATION_FAILED,
    ck.KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ck.KafkaError.GROUP_AUTHORIZATION_FAILED,
    ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
]


@pytest.mark.parametrize("code", ACCESS_REFUSALS)
def test_a_refused_login_or_acl_is_a_configuration_error_not_an_outage(code: int) -> None:
    error = ck.KafkaError(code, "refused")

    assert denies_access(error)
    assert isinstance(fetch_error(error, "fetch"), BrokerAccessDenied)
    assert isinstance(produce_error(error, "produce"), BrokerAccessDenied)


@pytest.mark.parametrize(
    "code", [ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN, ck.KafkaError._TIMED_OUT]
)
def test_an_unreachable_broker_is_not_an_access_refusal(code: int) -> None:
    assert not denies_access(ck.KafkaError(code))


def test_the_first_refusal_a_client_reports_is_kept_with_librdkafkas_reason() -> None:
    access = BrokerAccess()
    access.error_cb(ck.KafkaError(ck.KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    access.check()  # not a refusal: nothing to raise

    access.error_cb(ck.KafkaError(ck.KafkaError._AUTHENTICATION, "SASL handshake failed"))
    access.error_cb(ck.KafkaError(ck.KafkaError._SSL, "later"))

    with pytest.raises(BrokerAccessDenied, match="SASL handshake failed") as raised:
        access.check()
    assert raised.value.key == "kafka"


def test_a_clients_configuration_pickles_for_spark_with_the_receivers_own_access_watch() -> None:
    restored = pickle.loads(pickle.dumps({"error_cb": BROKER_ACCESS.error_cb}))

    assert restored["error_cb"].__self__ is BROKER_ACCESS
