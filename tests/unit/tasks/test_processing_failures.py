"""A processor that raises: the task is revived and the record retried, then its policy applies.

The harness of conftest.py (real RocksDB, fake Kafka) with a processor that raises on the
records the test chooses. Values are ``{"n": int}``; ``poison`` lists the ``n`` that raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.fakes import FakeCollector, FakeMessage
from tests.unit.tasks.conftest import (
    APP,
    CHECKPOINT_INTERVAL_S,
    COUNTS,
    EVENTS,
    LABELS,
    OUT,
    T00,
    T01,
    Harness,
    make_harness,
)
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.config import Settings
from worker.errors import FatalError, ProduceFailed, TopologyError
from worker.observability import Metrics, get_logger
from worker.processing import ProcessorContext, Topology
from worker.processing.built_topology import BuiltTopology
from worker.processing.handlers import (
    HEADER_PREFIX,
    ExceptionPolicy,
    RecordErrorHandler,
    RecordFailed,
)
from worker.serde import JSON, STR, SerdeError
from worker.tasks.failures import FailureDecision, ProcessingFailures, RunFailed
from worker.tasks.state import TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

DLQ = f"{APP}-dlq"


class Poison:
    """The processor: counts per key, writes the count, forwards; raises on chosen ``n``."""

    def __init__(self) -> None:
        self.raise_on: dict[int, int] = {}  # n -> failures left (-1: always)
        self.calls: list[int] = []
        self.error: Exception = ZeroDivisionError("poisoned")

    def __call__(self, ctx: ProcessorContext, key: str, value: dict[str, Any]) -> None:
        n = value["n"]
        self.calls.append(n)
        counts = ctx.store(COUNTS)
        count = (counts.get(key) or 0) + 1
        counts.put(key, count)  # a partial write the failed attempt leaves behind
        ctx.forward(key, {"n": n, "count": count})
        left = self.raise_on.get(n, 0)
        if left:
            self.raise_on[n] = left - 1 if left > 0 else -1
            raise self.error


@pytest.fixture
def poison() -> Poison:
    return Poison()


@pytest.fixture
def topology(poison: Poison) -> BuiltTopology:
    return (
        Topology()
        .add_source(EVENTS, EVENTS, key_serde=STR, value_serde=JSON)
        .add_table(LABELS, LABELS, key_serde=STR, value_serde=JSON)
        .add_store(COUNTS, key_serde=STR, value_serde=JSON)
        .add_processor("count", poison, parents=[EVENTS], stores=[COUNTS, LABELS])
        .add_sink(OUT, OUT, parents=["count"], key_serde=STR, value_serde=JSON)
        .build()
    )


@pytest.fixture(params=["log_and_continue"])
def policy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings(policy: str, idle_ms: int) -> Settings:
    return Settings.model_validate(
        {
            "application.id": APP,
            "statestore.checkpoint.interval.ms": int(CHECKPOINT_INTERVAL_S * 1000),
            "processing.exception.handler": policy,
            "processing.exception.max.retries": 2,
            "max.task.idle.ms": idle_ms,
        }
    )


def start(h: Harness, *task_ids: TaskId) -> list[Task]:
    h.assign(*task_ids)
    h.restore()
    return [h.manager.tasks[t] for t in task_ids]


def feed(h: Harness, task_id: TaskId, key: str, *ns: int) -> None:
    for n in ns:
        h.event(task_id, key, {"n": n})


def drain(h: Harness, rounds: int = 20) -> None:
    """Restore and process until nothing is left: what the loop does after revivals."""
    for _ in range(rounds):
        h.restore()
        if h.process() == 0 and not h.tasks.restoring():
            return
    raise AssertionError("still processing after many rounds")


def outputs(h: Harness) -> list[int]:
    return [JSON.deserialize(r.value)["n"] for r in h.collector.sent if r.topic == OUT]


def committed_count(task: Task, key: str) -> Any:
    data = task.stores[COUNTS].get_committed(key.encode())
    return None if data is None else JSON.deserialize(data)


def test_a_record_that_fails_once_revives_the_task_and_succeeds_on_retry(
    harness: Harness, poison: Poison
) -> None:
    (task,) = start(harness, T01)
    feed(harness, T01, "a", 1, 2)
    harness.process()
    assert harness.commits.commit()
    poison.raise_on[4] = 1
    feed(harness, T01, "a", 3, 4, 5)

    harness.process()

    assert task.state is TaskState.RESTORING, "revived from its last committed state"
    assert dict(task.stores[COUNTS].pending()) == {}, "the failed attempt's writes are gone"
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 1
    drain(harness)
    assert harness.commits.commit()
    assert committed_count(task, "a") == 5
    assert poison.calls == [1, 2, 3, 4, 3, 4, 5]  # from the committed offset again
    assert harness.group_offsets.offsets[(EVENTS, 1)] == 5
    assert harness.metric("worker_skipped_records_total", reason="processing_error") == 0


def test_a_record_failing_every_attempt_is_skipped_under_log_and_continue(
    harness: Harness, poison: Poison
) -> None:
    (task,) = start(harness, T01)
    poison.raise_on[2] = -1
    feed(harness, T01, "a", 1, 2, 3)

    drain(harness)
    assert harness.commits.commit()

    assert poison.calls.count(2) == 3, "tried 1 + processing.exception.max.retries times"
    assert committed_count(task, "a") == 2, "its partial writes never reached the store"
    assert harness.group_offsets.offsets[(EVENTS, 1)] == 3, "committed past the skipped record"
    assert harness.metric("worker_skipped_records_total", reason="processing_error") == 1
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 3
    assert [r for r in harness.collector.sent if r.topic == DLQ] == []


@pytest.mark.parametrize("policy", ["dead_letter"], indirect=True)
def test_a_record_failing_every_attempt_is_dead_lettered_once_with_its_stack_trace(
    harness: Harness, poison: Poison
) -> None:
    start(harness, T01)
    poison.raise_on[2] = -1
    feed(harness, T01, "a", 1, 2, 3)

    drain(harness)

    letters = [r for r in harness.collector.sent if r.topic == DLQ]
    assert len(letters) == 1
    (letter,) = letters
    assert letter.key == b"a" and JSON.deserialize(letter.value) == {"n": 2}
    found = dict(letter.headers)
    assert found[HEADER_PREFIX + "reason"] == b"processing_error"
    assert found[HEADER_PREFIX + "exception"] == b"ZeroDivisionError"
    assert found[HEADER_PREFIX + "message"] == b"poisoned"
    assert (found[HEADER_PREFIX + "topic"], found[HEADER_PREFIX + "offset"]) == (
        EVENTS.encode(),
        b"1",
    )
    assert b"Traceback" in found[HEADER_PREFIX + "stacktrace"]
    assert harness.metric("worker_dead_lettered_records_total", reason="processing_error") == 1


@pytest.mark.parametrize("policy", ["fail"], indirect=True)
def test_a_record_failing_every_attempt_stops_the_worker_under_fail(
    harness: Harness, poison: Poison
) -> None:
    start(harness, T01)
    poison.raise_on[2] = -1
    feed(harness, T01, "a", 1, 2)

    with pytest.raises(RecordFailed) as raised:
        drain(harness)

    message = str(raised.value)
    assert "task 0_1: record events-1@1 failed 3 times: ZeroDivisionError: poisoned" in message
    assert "processing.exception.handler = fail" in message
    assert poison.calls.count(2) == 3


def test_under_at_least_once_only_the_failing_task_is_revived(
    harness: Harness, poison: Poison
) -> None:
    t0, t1 = start(harness, T00, T01)
    poison.raise_on[9] = 1
    feed(harness, T00, "a", 1)
    feed(harness, T01, "b", 9)

    harness.process()

    assert t0.state is TaskState.RUNNING and dict(t0.stores[COUNTS].pending()) == {b"a": b"1"}
    assert t1.state is TaskState.RESTORING
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 1


def test_a_failing_record_ends_its_run_with_an_error_naming_its_index_and_the_record(
    harness: Harness, poison: Poison
) -> None:
    (task,) = start(harness, T01)
    poison.raise_on[9] = 1
    batch = [
        FakeMessage(EVENTS, 1, 4 + i, b"a", JSON.serialize({"n": n}))
        for i, n in enumerate([1, 9, 3])
    ]

    with pytest.raises(RunFailed) as raised:
        task.process_run(batch, 0)

    failed = raised.value
    assert (failed.index, failed.record) == (1, batch[1])
    assert failed.error is poison.error and failed.__cause__ is poison.error
    assert "events-1@5 (index 1) raised ZeroDivisionError: poisoned" in str(failed)
    assert poison.calls == [1, 9], "the records after it were not run"
    assert task.source_offsets_to_commit() == {(EVENTS, 1): 5}, "the one before it consumed"


@pytest.mark.parametrize("idle_ms", [-1])  # a batch of the test's own: no fetch ends
def test_a_failure_drops_the_rest_of_its_tasks_batch_but_not_the_other_tasks_records(
    harness: Harness, poison: Poison
) -> None:
    t0, t1 = start(harness, T00, T01)
    poison.raise_on[9] = 1
    value = lambda n: JSON.serialize({"n": n})  # noqa: E731
    batch = [
        FakeMessage(EVENTS, 0, 0, b"a", value(1)),
        FakeMessage(EVENTS, 1, 0, b"b", value(2)),
        FakeMessage(EVENTS, 1, 1, b"b", value(9)),
        FakeMessage(EVENTS, 1, 2, b"b", value(3)),
        FakeMessage(EVENTS, 0, 1, b"a", value(4)),
    ]

    assert harness.router.process(batch) == 3

    # Each task's records in order (the tasks read two partitions each: one after the other)
    assert poison.calls == [1, 4, 2, 9], "the failed task's later records were dropped"
    assert t1.state is TaskState.RESTORING
    assert dict(t0.stores[COUNTS].pending()) == {b"a": b"2"}
    assert t0.source_offsets_to_commit() == {(EVENTS, 0): 2}


class AbortingProtocol:
    """An exactly-once-like protocol: aborting drops every task's uncommitted output."""

    def __init__(self) -> None:
        self.aborts = 0

    def __call__(self, tasks: Sequence[Task], releases: Any = ()) -> dict[tuple[str, int], int]:
        raise AssertionError("not committed in this test")

    def abort(self) -> bool:
        self.aborts += 1
        return True


def test_when_the_protocol_aborts_every_running_task_is_revived(
    topology: BuiltTopology, ctx: TaskContext, poison: Poison
) -> None:
    protocol = AbortingProtocol()
    harness = make_harness(topology, ctx, protocol)
    t0, t1 = start(harness, T00, T01)
    poison.raise_on[9] = 1
    feed(harness, T00, "a", 1)
    feed(harness, T01, "b", 9)

    harness.process()

    assert protocol.aborts == 1
    assert t0.state is TaskState.RESTORING and t1.state is TaskState.RESTORING
    assert dict(t0.stores[COUNTS].pending()) == {}
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 2
    harness.manager.close_all(clean=False)


@pytest.mark.parametrize(
    "error",
    [FatalError("disk gone"), TopologyError("processor 'p' did not declare store 'gone'")],
    ids=["fatal", "topology"],
)
def test_a_fatal_error_of_the_worker_is_not_blamed_on_the_record(
    harness: Harness, poison: Poison, error: Exception
) -> None:
    start(harness, T01)
    poison.raise_on[1] = -1
    poison.error = error
    feed(harness, T01, "a", 1)

    with pytest.raises(type(error), match=str(error)):
        harness.process()
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 0
    assert harness.metric("worker_skipped_records_total", reason="processing_error") == 0


def test_a_producer_failure_while_sending_revives_every_running_task_without_blaming_the_record(
    harness: Harness, poison: Poison
) -> None:
    t0, t1 = start(harness, T00, T01)
    poison.raise_on[9] = 1
    poison.error = ProduceFailed("broker gone")
    feed(harness, T00, "a", 1)
    feed(harness, T01, "b", 9)

    harness.process()

    assert t0.state is TaskState.RESTORING and t1.state is TaskState.RESTORING
    assert harness.metric("worker_task_revivals_total", reason="produce_failed") == 2
    drain(harness)
    assert harness.commits.commit()
    assert poison.calls == [1, 9, 1, 9], "processed again once the producer works"
    assert harness.metric("worker_skipped_records_total", reason="processing_error") == 0


def failures_under(policy: ExceptionPolicy, max_retries: int) -> ProcessingFailures:
    errors = RecordErrorHandler(
        "0_1", policy, policy, DLQ, FakeCollector(), Metrics(), FakeClock(), get_logger()
    )
    return ProcessingFailures(errors, max_retries, get_logger())


def record(partition: int, offset: int) -> FakeMessage:
    return FakeMessage("t", partition, offset, b"k", b"v")


BOOM = ZeroDivisionError("boom")


def test_failure_counts_and_skip_marks_are_forgotten_once_committed_past() -> None:
    failures = failures_under(ExceptionPolicy.LOG_AND_CONTINUE, max_retries=2)

    assert failures.failed(record(0, 5), BOOM) == (FailureDecision.RETRY, 1)
    assert failures.failed(record(0, 5), BOOM) == (FailureDecision.RETRY, 2)
    failures.failed(record(1, 5), BOOM)
    failures.failed(record(1, 5), BOOM)
    assert failures.failed(record(1, 5), BOOM) == (FailureDecision.SKIP, 3)
    failures.forget_committed({("t", 0): 6})

    assert failures.attempts("t", 0, 5) == 0 and failures.attempts("t", 1, 5) == 0
    assert failures.failed(record(0, 5), BOOM) == (FailureDecision.RETRY, 1)
    assert failures.skip(record(1, 5)), "partition 1 is not committed past its mark"
    failures.forget_committed({("t", 1): 6})
    assert not failures.skip(record(1, 5))


@pytest.mark.parametrize("choice", [ExceptionPolicy.LOG_AND_CONTINUE, ExceptionPolicy.DEAD_LETTER])
def test_after_the_last_retry_a_skipping_policy_marks_the_record(choice: ExceptionPolicy) -> None:
    failures = failures_under(choice, max_retries=1)

    assert failures.failed(record(0, 0), BOOM)[0] is FailureDecision.RETRY
    assert not failures.skip(record(0, 0))
    assert failures.failed(record(0, 0), BOOM) == (FailureDecision.SKIP, 2)
    assert failures.attempts("t", 0, 0) == 0
    assert failures.skip(record(0, 0)) and not failures.skip(record(0, 1))


def test_after_the_last_retry_the_fail_policy_stops_the_worker() -> None:
    failures = failures_under(ExceptionPolicy.FAIL, max_retries=1)

    assert failures.failed(record(0, 0), BOOM)[0] is FailureDecision.RETRY
    with pytest.raises(RecordFailed, match="record t-0@0 failed 2 times: ZeroDivisionError"):
        failures.failed(record(0, 0), BOOM)
    assert failures.attempts("t", 0, 0) == 0 and not failures.marked


def test_two_bad_records_in_a_row_are_both_skipped_without_retrying_the_first_again(
    harness: Harness, poison: Poison
) -> None:
    (task,) = start(harness, T01)
    poison.raise_on[2] = -1
    poison.raise_on[3] = -1
    feed(harness, T01, "a", 1, 2, 3, 4)

    drain(harness)
    assert harness.commits.commit()

    assert poison.calls.count(2) == 3, "skipped, not retried, when 3's revivals bring it back"
    assert poison.calls.count(3) == 3
    assert committed_count(task, "a") == 2
    assert harness.group_offsets.offsets[(EVENTS, 1)] == 4
    assert harness.metric("worker_skipped_records_total", reason="processing_error") == 2


@pytest.mark.parametrize("policy", ["dead_letter"])
def test_a_burst_of_bad_records_is_dead_lettered_once_each_under_at_least_once(
    harness: Harness, poison: Poison
) -> None:
    (task,) = start(harness, T01)
    for n in range(2, 9):
        poison.raise_on[n] = -1
    feed(harness, T01, "a", 1, *range(2, 9), 9)

    drain(harness, rounds=60)
    assert harness.commits.commit()

    letters = [JSON.deserialize(r.value)["n"] for r in harness.collector.sent if r.topic == DLQ]
    assert letters == list(range(2, 9)), "each once, however often the revivals replay them"
    assert harness.metric("worker_dead_lettered_records_total", reason="processing_error") == 7
    assert committed_count(task, "a") == 2


def test_a_record_that_does_not_decode_in_processing_is_not_retried(
    harness: Harness, poison: Poison
) -> None:
    start(harness, T01)
    poison.raise_on[2] = -1
    poison.error = SerdeError("not JSON")
    feed(harness, T01, "a", 1, 2, 3)

    drain(harness)

    assert poison.calls.count(2) == 1, "bytes that do not decode never will"
    assert outputs(harness)[-1] == 3
    assert harness.metric("worker_skipped_records_total", reason="processing_error") == 1
