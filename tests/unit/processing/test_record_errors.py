"""Bad source records in the task graph: undecodable, oversized, and the three policies.

The error handler is real; the record collector (the dead-letter sink) is the fake.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import DictStore, FakeCollector
from tests.support.feeding import feed
from worker.clock import FakeClock
from worker.observability import Metrics, get_logger
from worker.processing import ProcessorContext, Topology
from worker.processing.graph import TaskGraph
from worker.processing.handlers import (
    HEADER_PREFIX,
    BadRecord,
    ExceptionPolicy,
    RecordErrorHandler,
    RecordFailed,
)
from worker.processing.store_views import KeyValueStore
from worker.serde import JSON, STR, SerdeError

FAIL = ExceptionPolicy.FAIL
LOG = ExceptionPolicy.LOG_AND_CONTINUE
DLQ = ExceptionPolicy.DEAD_LETTER
DLQ_TOPIC = "app-dlq"


class World:
    def __init__(self, policy: ExceptionPolicy, max_record_bytes: int = -1) -> None:
        self.collector = FakeCollector()
        self.metrics = Metrics()
        self.clock = FakeClock()
        self.seen: list[tuple[Any, Any]] = []
        self.errors = RecordErrorHandler(
            "0_1",
            policy,
            policy,
            DLQ_TOPIC,
            self.collector,
            self.metrics,
            self.clock,
            get_logger(),
            max_record_bytes,
        )
        self.table = DictStore()

        def keep(ctx: ProcessorContext, key: Any, value: Any) -> None:
            self.seen.append((key, value))

        (subtopology,) = (
            Topology()
            .add_source("in", "input", key_serde=STR, value_serde=JSON)
            .add_table("t", "table-topic", key_serde=STR, value_serde=JSON)
            .add_processor("p", keep, parents=["in"], stores=["t"])
            .build()
            .subtopologies
        )
        self.graph = TaskGraph(subtopology, "0_1", {"t": self.table}, self.collector, self.errors)

    def send(self, key: bytes | None, value: bytes | None, offset: int = 7) -> None:
        feed(self.graph, "input", 1, offset, 1234, key, value, [("trace", b"x")])

    def skipped(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "worker_skipped_records_total", {"reason": reason}
        )
        return value or 0.0

    def metric(self, name: str) -> float:
        value = self.metrics.registry.get_sample_value(name, {"reason": "deserialization_error"})
        return value or 0.0

    def dead_letters(self) -> list[Any]:
        return [r for r in self.collector.sent if r.topic == DLQ_TOPIC]


def headers(record: Any) -> dict[str, bytes]:
    return dict(record.headers)


@pytest.mark.parametrize("key, value", [(b"\xff\xfe", b"1"), (b"a", b"{not json")])
def test_an_undecodable_record_under_fail_raises_naming_the_record_and_the_setting(
    key: bytes, value: bytes
) -> None:
    world = World(FAIL)

    with pytest.raises(RecordFailed) as raised:
        world.send(key, value)

    message = str(raised.value)
    assert "input-1@7" in message and "default.deserialization.exception.handler = fail" in message
    assert "SerdeError" in message
    assert world.collector.sent == [] and world.seen == []


def test_an_undecodable_record_under_log_and_continue_is_skipped_and_counted() -> None:
    world = World(LOG)

    world.send(b"a", b"{not json", offset=7)
    world.send(b"a", b"1", offset=8)

    assert world.seen == [("a", 1)]
    assert world.skipped("deserialization_error") == 1
    assert world.collector.sent == []  # nothing dead-lettered


def test_an_undecodable_record_under_dead_letter_goes_to_the_dlq_with_error_and_coordinates() -> (
    None
):
    world = World(DLQ)

    world.send(b"\xff", b"1", offset=7)

    (letter,) = world.dead_letters()
    assert (letter.key, letter.value) == (b"\xff", b"1")
    found = headers(letter)
    assert found["trace"] == b"x"  # the record's own headers are kept
    assert found[HEADER_PREFIX + "reason"] == b"deserialization_error"
    assert found[HEADER_PREFIX + "exception"] == b"SerdeError"
    assert b"not UTF-8" in found[HEADER_PREFIX + "message"]
    assert found[HEADER_PREFIX + "topic"] == b"input"
    assert found[HEADER_PREFIX + "partition"] == b"1"
    assert found[HEADER_PREFIX + "offset"] == b"7"
    assert found[HEADER_PREFIX + "task"] == b"0_1"
    assert world.skipped("deserialization_error") == 1
    assert world.seen == []


def test_a_record_over_max_record_bytes_takes_the_deserialization_policy_without_its_value() -> (
    None
):
    world = World(DLQ, max_record_bytes=10)

    world.send(b"k", b'"' + b"x" * 20 + b'"')
    world.send(b"k", b'"short"')

    (letter,) = world.dead_letters()
    assert letter.key == b"k" and letter.value is None
    assert headers(letter)[HEADER_PREFIX + "reason"] == b"record_too_large"
    assert headers(letter)[HEADER_PREFIX + "size"] == b"23"
    assert world.skipped("record_too_large") == 1
    assert world.seen == [("k", "short")]


def test_an_oversized_table_record_is_not_written_to_the_table() -> None:
    world = World(LOG, max_record_bytes=10)

    feed(world.graph, "table-topic", 1, 0, 0, b"k", b"x" * 11)
    feed(world.graph, "table-topic", 1, 1, 0, b"j", b"1")

    assert world.table.get(b"k") is None and world.table.get(b"j") == b"1"
    assert world.skipped("record_too_large") == 1


def test_an_oversized_record_under_fail_stops_with_the_size_and_the_bound() -> None:
    world = World(FAIL, max_record_bytes=4)

    with pytest.raises(RecordFailed, match=r"over max.record.bytes \(4\)"):
        world.send(b"k", b"12345")


def test_without_a_handler_deserialization_errors_propagate_unchanged() -> None:
    world = World(LOG)
    (subtopology,) = (
        Topology().add_source("in", "input", key_serde=STR, value_serde=JSON).build().subtopologies
    )
    graph = TaskGraph(subtopology, "0_1", {}, world.collector)

    with pytest.raises(ValueError, match="not JSON"):
        feed(graph, "input", 0, 0, 0, b"a", b"{")


def test_skipped_records_log_at_most_one_line_a_second_counting_the_rest() -> None:
    world = World(LOG)
    logged: list[dict[str, Any]] = []

    class Log:
        def warning(self, event: str, **fields: Any) -> None:
            logged.append({"event": event, **fields})

    world.errors._warnings._log = Log()
    for offset in range(5):
        world.send(b"a", b"{", offset=offset)
    world.clock.advance(1.0)
    world.send(b"a", b"{", offset=5)

    assert [(e["event"], e["record"], e["suppressed"]) for e in logged] == [
        ("record.skipped", "input-1@0", 0),
        ("record.skipped", "input-1@5", 4),
    ]
    assert world.skipped("deserialization_error") == 6


def test_processing_failed_under_dead_letter_carries_the_stack_trace() -> None:
    world = World(DLQ)
    record = BadRecord("input", 2, 9, 0, b"k", b"v")

    world.errors.processing_failed(record, ZeroDivisionError("boom"), "Traceback: here")

    (letter,) = world.dead_letters()
    assert headers(letter)[HEADER_PREFIX + "reason"] == b"processing_error"
    assert headers(letter)[HEADER_PREFIX + "exception"] == b"ZeroDivisionError"
    assert headers(letter)[HEADER_PREFIX + "stacktrace"] == b"Traceback: here"
    assert world.skipped("processing_error") == 1


def test_a_record_skipped_again_after_an_aborting_revival_is_dead_lettered_again_counted_once() -> (
    None
):
    world = World(DLQ)

    world.send(b"a", b"{", offset=7)
    world.errors.letters_lost()  # the revival aborted the transaction that carried it
    world.send(b"a", b"{", offset=7)  # reprocessed from the last commit

    assert len(world.dead_letters()) == 2, "the first one was in an aborted transaction"
    assert world.skipped("deserialization_error") == 1
    assert world.metric("worker_dead_lettered_records_total") == 1


def test_records_replayed_by_a_revival_that_kept_its_sends_are_not_dead_lettered_again() -> None:
    world = World(DLQ)

    for offset in (3, 5, 7):
        world.send(b"a", b"{", offset=offset)
    for offset in (3, 5, 7, 8):  # at-least-once: the task's own record failed, it replays
        world.send(b"a", b"{", offset=offset)

    assert [dict(r.headers)["__worker.errors.offset"] for r in world.dead_letters()] == [
        b"3",
        b"5",
        b"7",
        b"8",
    ]
    assert world.metric("worker_dead_lettered_records_total") == 4


def test_a_commit_past_the_letters_forgets_them() -> None:
    world = World(DLQ)
    world.send(b"a", b"{", offset=7)

    world.errors.letters_committed({("input", 1): 8})

    assert world.errors._lettered == {}


def test_a_null_key_reaching_a_store_raises_a_serde_error_naming_the_store() -> None:
    view = KeyValueStore("totals", DictStore(), STR, JSON, read_only=False)

    for call in (lambda: view.get(None), lambda: view.put(None, 1), lambda: view.delete(None)):
        with pytest.raises(SerdeError, match="store 'totals': a key cannot be None"):
            call()
