"""Purging repartition topics below the committed offsets: at most one request per
interval, never one while another is in flight, unsupported brokers detected and skipped."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import confluent_kafka as ck
import structlog

from worker.clock import FakeClock
from worker.events import REPARTITION_PURGE_UNSUPPORTED
from worker.kafka.repartition_purge import GIVE_UP_AFTER, RepartitionPurge

TOPIC = "app-g-repartition"


class Broker:
    """Records each DeleteRecords request; its futures settle when the test says."""

    def __init__(self) -> None:
        self.requests: list[dict[tuple[str, int], int]] = []
        self.futures: list[Future[Any]] = []

    def delete_records(self, request: list[ck.TopicPartition]) -> dict[Any, Future[Any]]:
        self.requests.append({(tp.topic, tp.partition): tp.offset for tp in request})
        futures = {tp: Future() for tp in request}
        self.futures.extend(futures.values())
        return futures  # type: ignore[return-value]

    def settle(self, error: Exception | None = None) -> None:
        for future in self.futures:
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)


def purge(broker: Broker, clock: FakeClock) -> RepartitionPurge:
    return RepartitionPurge({TOPIC}, 30_000, clock, broker.delete_records)


def test_records_below_the_committed_offsets_of_repartition_topics_are_purged_per_interval() -> (
    None
):
    clock, broker = FakeClock(), Broker()
    p = purge(broker, clock)
    p.committed({(TOPIC, 0): 10, ("input", 0): 99})
    assert broker.requests == []  # the interval has not passed
    clock.advance(30)
    p.committed({(TOPIC, 1): 4})
    assert broker.requests == [{(TOPIC, 0): 10, (TOPIC, 1): 4}]


def test_no_new_request_while_one_is_in_flight_and_nothing_purged_twice() -> None:
    clock, broker = FakeClock(), Broker()
    p = purge(broker, clock)
    clock.advance(30)
    p.committed({(TOPIC, 0): 10})
    clock.advance(30)
    p.committed({(TOPIC, 0): 12})
    assert len(broker.requests) == 1  # the first has not settled
    broker.settle()
    p.committed({})
    assert broker.requests[1:] == [{(TOPIC, 0): 12}]
    broker.settle()
    clock.advance(30)
    p.committed({(TOPIC, 0): 12})
    assert len(broker.requests) == 2


def test_a_broker_that_does_not_support_delete_records_turns_purging_off_once() -> None:
    clock, broker = FakeClock(), Broker()
    p = purge(broker, clock)
    unsupported = ck.KafkaException(ck.KafkaError(ck.KafkaError._UNSUPPORTED_FEATURE))
    with structlog.testing.capture_logs() as logs:
        clock.advance(30)
        p.committed({(TOPIC, 0): 10})
        broker.settle(unsupported)
        clock.advance(30)
        p.committed({(TOPIC, 0): 11})
        clock.advance(30)
        p.committed({(TOPIC, 0): 12})
    assert not p.enabled
    assert len(broker.requests) == 1
    assert [e["event"] for e in logs].count(REPARTITION_PURGE_UNSUPPORTED) == 1


def test_a_broker_that_drops_every_request_is_given_up_on_without_an_error() -> None:
    clock, broker = FakeClock(), Broker()
    p = purge(broker, clock)
    dropped = ck.KafkaException(ck.KafkaError(ck.KafkaError._TRANSPORT))
    for offset in range(GIVE_UP_AFTER + 2):
        clock.advance(30)
        p.committed({(TOPIC, 0): 10 + offset})
        broker.settle(dropped)
    p.committed({})
    assert not p.enabled
    assert len(broker.requests) == GIVE_UP_AFTER


def test_failures_after_a_success_are_retried() -> None:
    clock, broker = FakeClock(), Broker()
    p = purge(broker, clock)
    clock.advance(30)
    p.committed({(TOPIC, 0): 10})
    broker.settle()
    dropped = ck.KafkaException(ck.KafkaError(ck.KafkaError._TRANSPORT))
    for offset in range(GIVE_UP_AFTER + 2):
        clock.advance(30)
        p.committed({(TOPIC, 0): 11 + offset})
        broker.settle(dropped)
    assert p.enabled
