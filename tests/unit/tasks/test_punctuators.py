"""Punctuators wired into tasks: who punctuates, what a punctuation commits, and failures.

The harness of conftest.py (real RocksDB, fake Kafka, fake clock) with a topology whose
processor counts per key and has an ``init`` that schedules what the test asks for. The
punctuator ``emit`` writes a marker to the store and forwards one record per run.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.tasks.conftest import (
    APP,
    COUNTS,
    COUNTS_CHANGELOG,
    EVENTS,
    OUT,
    T00,
    T01,
    Harness,
    make_harness,
)

# The processing failure tests' policy (log_and_continue unless a test says otherwise)
# and their start.
from tests.unit.tasks.test_processing_failures import (  # noqa: F401
    AbortingProtocol,
    policy,
    start,
)
from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.config import Settings
from worker.errors import TopologyError
from worker.processing import ProcessorContext, Topology
from worker.processing.built_topology import BuiltTopology
from worker.processing.handlers import RecordFailed
from worker.processing.punctuators import ProcessorInitFailed
from worker.serde import JSON, STR
from worker.state.release_marker import RELEASE_KEY, ReleaseMarker
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext


class App:
    """The processor, its init and its punctuator, with what each saw."""

    def __init__(self) -> None:
        self.schedules: list[tuple[int, str]] = [(10_000, "wall")]
        self.inits: list[tuple[str, str]] = []  # (task, current node) per init
        self.runs: list[dict[str, Any]] = []
        self.raise_in_run: int = 0  # runs left that raise (-1: every one)
        self.schedule_in_process = False

    def process(self, ctx: ProcessorContext, key: str, value: Any) -> None:
        counts = ctx.store(COUNTS)
        counts.put(key, (counts.get(key) or 0) + 1)
        if self.schedule_in_process:
            ctx.schedule(1000, "wall", self.emit)

    def init(self, ctx: ProcessorContext) -> None:
        self.inits.append((ctx.task_id, ctx.current_node.name))
        for interval, kind in self.schedules:
            ctx.schedule(interval, kind, self.emit)

    def emit(self, ctx: ProcessorContext, now_ms: int) -> None:
        self.runs.append(
            {
                "task": ctx.task_id,
                "now": now_ms,
                "timestamp": ctx.timestamp,
                "headers": ctx.headers,
                "offset": ctx.offset,
                "topic": ctx.topic,
            }
        )
        ctx.store(COUNTS).put("marker", now_ms)
        ctx.forward("tick", {"now": now_ms})
        if self.raise_in_run:
            self.raise_in_run -= 1 if self.raise_in_run > 0 else 0
            raise ZeroDivisionError("punctuator broke")


@pytest.fixture
def settings(policy: str) -> Settings:  # noqa: F811 - the imported fixture
    """The processing failure tests' settings, with record times taken from the values."""
    return Settings.model_validate(
        {
            "application.id": APP,
            "processing.exception.handler": policy,
            "processing.exception.max.retries": 2,
            "timestamp.extractor": f"{__name__}:value_time",
        }
    )


@pytest.fixture
def app() -> App:
    return App()


@pytest.fixture
def topology(app: App) -> BuiltTopology:
    return (
        Topology()
        .add_source(EVENTS, EVENTS, key_serde=STR, value_serde=JSON)
        .add_store(COUNTS, key_serde=STR, value_serde=JSON)
        .add_processor("count", app.process, parents=[EVENTS], stores=[COUNTS], init=app.init)
        .add_sink(OUT, OUT, parents=["count"], key_serde=STR, value_serde=JSON)
        .build()
    )


def roles(active: tuple[TaskId, ...] = (), standby: tuple[TaskId, ...] = ()) -> Assignment:
    return Assignment(frozenset(active), frozenset(standby), frozenset(), {}, {}, generation=1)


def tick(h: Harness, seconds: float) -> int:
    """Advance the fake clock, then run the loop's punctuation check."""
    h.clock.advance(seconds)
    return h.router.punctuate()


def value_time(record: Any, stream_time_ms: int) -> int:
    """The ``timestamp.extractor`` of these tests: the time in the value, or 0."""
    return int(JSON.deserialize(record.value()).get("ts", 0))


def at(h: Harness, *timestamps: int) -> int:
    """Process one record per timestamp on task 0_0, then run the punctuation check."""
    for ts in timestamps:
        h.event(T00, "a", {"ts": ts})
    h.process()
    return h.router.punctuate()


def ticks(h: Harness) -> list[int]:
    return [JSON.deserialize(r.value)["now"] for r in h.collector.sent if r.topic == OUT]


def committed(task: Task, key: str) -> Any:
    data = task.stores[COUNTS].get_committed(key.encode())
    return None if data is None else JSON.deserialize(data)


def test_init_runs_as_its_processor_when_the_task_starts_running(
    harness: Harness, app: App
) -> None:
    harness.assign(T00)
    assert app.inits == [], "not while restoring"

    harness.restore()

    assert app.inits == [("0_0", "count")]
    assert len(harness.manager.tasks[T00].punctuators or ()) == 1


def test_a_wall_punctuator_runs_every_interval_as_its_processor_with_a_synthetic_record(
    harness: Harness, app: App
) -> None:
    start(harness, T00)
    wall_ms = int(harness.clock.wall() * 1000)

    assert tick(harness, 9.999) == 0
    assert tick(harness, 0.001) == 1
    assert tick(harness, 5) == 0
    assert tick(harness, 25) == 1, "missed runs are skipped, not caught up"

    assert [r["now"] for r in app.runs] == [wall_ms + 10_000, wall_ms + 40_000]
    first = app.runs[0]
    assert (first["timestamp"], first["headers"], first["offset"], first["topic"]) == (
        wall_ms + 10_000,
        None,
        -1,
        "",
    )
    assert ticks(harness) == [wall_ms + 10_000, wall_ms + 40_000], "forwarded to the sink"
    assert harness.metric("worker_punctuations_total", task="0_0", kind="wall") == 2
    assert harness.metric("worker_punctuation_seconds_count") == 2


def test_a_punctuation_alone_makes_the_task_commit_its_writes(harness: Harness, app: App) -> None:
    (task,) = start(harness, T00)
    assert not harness.commits.commit(), "nothing to commit yet"

    tick(harness, 10)

    assert task.needs_commit()
    assert harness.commits.commit()
    assert committed(task, "marker") == app.runs[0]["now"]
    assert harness.collector.changelog_for(f"{APP}-{COUNTS}-changelog", 0) == [
        (b"marker", JSON.serialize(app.runs[0]["now"]))
    ]
    assert not task.needs_commit()


def test_only_running_active_tasks_punctuate(harness: Harness, app: App) -> None:
    harness.manager.on_assigned(roles(active=(T00,), standby=(T01,)))
    assert harness.manager.tasks[T00].state is TaskState.RESTORING

    assert tick(harness, 60) == 0, "restoring: no init, no schedule"
    harness.restore()
    assert tick(harness, 10) == 1
    assert {r["task"] for r in app.runs} == {"0_0"}, "never the standby"
    assert app.inits == [("0_0", "count")]


def test_a_revoked_task_drops_its_schedules_without_a_final_punctuation(
    harness: Harness, app: App
) -> None:
    (task,) = start(harness, T00)
    tick(harness, 9)

    harness.manager.on_assigned(roles(standby=(T00,)))

    assert task.state is TaskState.RUNNING and task.role is TaskRole.STANDBY
    assert tick(harness, 60) == 0
    assert app.runs == []


def test_a_standby_recycled_into_an_active_runs_init_and_punctuates(
    harness: Harness, app: App
) -> None:
    harness.manager.on_assigned(roles(standby=(T00,)))
    assert app.inits == []

    harness.manager.on_assigned(roles(active=(T00,)))
    harness.restore()

    assert app.inits == [("0_0", "count")]
    assert tick(harness, 10) == 1


def test_a_standby_taken_over_on_its_release_runs_init_and_punctuates(
    harness: Harness, app: App
) -> None:
    harness.manager.on_assigned(roles(standby=(T00,)), incoming=frozenset({T00}))
    marker = ReleaseMarker(1, {(EVENTS, 0): 0})
    harness.restore_consumer.append(COUNTS_CHANGELOG, 0, RELEASE_KEY, None, marker.headers())
    harness.tasks.restore_step(timeout=0.0)
    harness.manager.check_releases()

    assert harness.manager.tasks[T00].is_active
    assert app.inits == [("0_0", "count")]
    assert tick(harness, 10) == 1


def test_a_stream_punctuator_fires_once_per_boundary_its_task_crosses(
    harness: Harness, app: App
) -> None:
    app.schedules = [(60_000, "stream")]
    start(harness, T00)

    assert at(harness, 59_999) == 1, "boundary 0: a task without stream time starts before it"
    assert harness.router.punctuate() == 0, "stream time did not move"
    assert at(harness, 30_000) == 0, "an older record leaves stream time where it was"
    assert at(harness, 60_000) == 1
    assert at(harness, 120_500, 250_000) == 1, "boundaries passed together fire once"
    assert tick(harness, 3600) == 0, "the wall clock does not move stream time"

    assert [r["now"] for r in app.runs] == [59_999, 60_000, 250_000]
    assert [r["timestamp"] for r in app.runs] == [59_999, 60_000, 250_000]
    sent = [r for r in harness.collector.sent if r.topic == OUT]
    assert [(r.timestamp, r.headers) for r in sent] == [
        (t, None) for t in (59_999, 60_000, 250_000)
    ]
    assert harness.metric("worker_punctuations_total", task="0_0", kind="stream") == 3


def test_a_punctuation_lost_before_its_commit_runs_again_and_a_committed_one_never_does(
    harness: Harness, app: App
) -> None:
    app.schedules = [(60_000, "stream")]
    (task,) = start(harness, T00)
    at(harness, 60_000)
    assert harness.commits.commit()
    assert at(harness, 60_500) == 0
    assert at(harness, 120_000) == 1
    assert task.needs_commit()

    harness.tasks.revive([task], "crash", "before the commit")  # as a restart would
    harness.restore()
    harness.process()  # the records after the commit, again
    assert harness.router.punctuate() == 1
    assert harness.commits.commit()

    assert [r["now"] for r in app.runs] == [60_000, 120_000, 120_000]
    assert app.inits == [("0_0", "count")] * 2
    assert task.stream_time == 120_000
    assert committed(task, "marker") == 120_000
    changelog = harness.collector.changelog_for(f"{APP}-{COUNTS}-changelog", 0)
    assert [v for k, v in changelog if k == b"marker"] == [b"60000", b"120000"]


def test_schedule_outside_init_is_a_clear_error(harness: Harness, app: App) -> None:
    start(harness, T00)
    app.schedule_in_process = True
    harness.event(T00, "a")

    with pytest.raises(TopologyError, match="ctx.schedule is only valid inside.*init"):
        harness.process()


@pytest.mark.parametrize(
    ("interval", "kind"), [(0, "wall"), (1000, "hourly")], ids=["interval", "kind"]
)
def test_a_bad_schedule_in_init_stops_the_worker_naming_the_processor(
    harness: Harness, app: App, interval: int, kind: str
) -> None:
    app.schedules = [(interval, kind)]
    harness.assign(T00)

    with pytest.raises(ProcessorInitFailed, match="init of processor 'count' raised ValueError"):
        harness.restore()


def test_a_failing_punctuator_revives_its_task_and_drops_the_partial_work(
    harness: Harness, app: App
) -> None:
    (task,) = start(harness, T00)
    app.raise_in_run = 1

    tick(harness, 10)

    assert task.state is TaskState.RESTORING
    assert dict(task.stores[COUNTS].pending()) == {}, "the failed run's write is gone"
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 1
    harness.restore()
    assert app.inits == [("0_0", "count")] * 2, "init again after the revival"
    assert tick(harness, 10) == 1
    assert harness.commits.commit()
    assert committed(task, "marker") == app.runs[-1]["now"]


def test_a_punctuator_failing_every_attempt_is_skipped_once_under_log_and_continue(
    harness: Harness, app: App
) -> None:
    (task,) = start(harness, T00)
    app.raise_in_run = 3  # 1 + processing.exception.max.retries attempts

    for _ in range(3):
        tick(harness, 10)
        harness.restore()
    assert len(app.runs) == 3
    tick(harness, 10)

    assert len(app.runs) == 3, "the fourth run is skipped, not run"
    assert task.state is TaskState.RUNNING
    assert harness.metric("worker_skipped_records_total", reason="punctuation_error") == 1
    assert tick(harness, 10) == 1 and len(app.runs) == 4, "and the next one runs again"


@pytest.mark.parametrize("policy", ["fail"], indirect=True)
def test_a_punctuator_failing_every_attempt_stops_the_worker_under_fail(
    harness: Harness, app: App
) -> None:
    start(harness, T00)
    app.raise_in_run = -1
    for _ in range(2):
        tick(harness, 10)
        harness.restore()

    with pytest.raises(RecordFailed) as raised:
        tick(harness, 10)

    message = str(raised.value)
    assert "punctuator 'emit' of processor 'count' failed 3 times" in message
    assert "ZeroDivisionError: punctuator broke" in message
    assert "processing.exception.handler = fail" in message


def test_a_punctuator_that_recovers_has_its_attempts_forgotten(harness: Harness, app: App) -> None:
    start(harness, T00)
    for _ in range(3):  # fails, succeeds: never twice in a row, never the policy
        app.raise_in_run = 1
        tick(harness, 10)
        harness.restore()
        tick(harness, 10)

    assert harness.metric("worker_skipped_records_total", reason="punctuation_error") == 0
    assert harness.metric("worker_task_revivals_total", reason="processing_error") == 3


def test_when_the_protocol_aborts_a_failing_punctuator_revives_every_running_task(
    topology: BuiltTopology, ctx: TaskContext, app: App
) -> None:
    protocol = AbortingProtocol()
    harness = make_harness(topology, ctx, protocol)
    t0, t1 = start(harness, T00, T01)
    app.raise_in_run = 1

    try:
        assert tick(harness, 10) == 0
        assert protocol.aborts == 1
        assert t0.state is TaskState.RESTORING and t1.state is TaskState.RESTORING
        assert len(app.runs) == 1, "the second task was revived before its turn"
        assert harness.metric("worker_task_revivals_total", reason="processing_error") == 2
    finally:
        harness.manager.close_all(clean=False)


def test_punctuators_of_one_processor_sharing_a_function_name_are_told_apart(
    harness: Harness, app: App
) -> None:
    app.schedules = [(10_000, "wall"), (10_000, "wall")]
    (task,) = start(harness, T00)
    app.raise_in_run = 1

    assert tick(harness, 10) == 0  # the first raises; the second runs and succeeds

    assert len(app.runs) == 2
    failures = task.failures
    assert failures is not None
    assert failures._punctuator_attempts == {("count", "emit"): 1}, "not cleared by emit#2"
