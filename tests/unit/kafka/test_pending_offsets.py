"""PendingOffsets: ready only when every partition is settled; results never wait and leave
out what failed or is still pending."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from worker.kafka.admin import PendingOffsets


def answered(offset: int) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(SimpleNamespace(offset=offset))
    return future


def failed() -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
    return future


def test_results_leave_out_failed_pending_and_negative_offsets_and_never_wait() -> None:
    pending: Future[Any] = Future()
    offsets = PendingOffsets(
        {("in", 0): answered(5), ("in", 1): failed(), ("in", 2): pending, ("in", 3): answered(-1)}
    )

    assert not offsets.ready()
    assert offsets.result() == {("in", 0): 5}

    pending.set_result(SimpleNamespace(offset=12))

    assert offsets.ready()
    assert offsets.result() == {("in", 0): 5, ("in", 2): 12}


def test_nothing_asked_is_ready_at_once_with_nothing() -> None:
    offsets = PendingOffsets({})
    assert offsets.ready()
    assert offsets.result() == {}
