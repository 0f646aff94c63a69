"""The task lifecycle state machine: every move in ALLOWED works, every other one raises."""

from __future__ import annotations

import functools

import pytest
import structlog
from structlog.testing import capture_logs

from tests.support import lifecycles
from worker.errors import WorkerError
from worker.events import TASK_TRANSITION
from worker.lifecycle import IllegalTransition, StateMachine
from worker.observability import Metrics
from worker.tasks.state import ALLOWED, TaskState, task_lifecycle

ALLOWED_MOVES = [(src, dst) for src in TaskState for dst in sorted(ALLOWED[src], key=str)]
FORBIDDEN_MOVES = [(src, dst) for src in TaskState for dst in TaskState if dst not in ALLOWED[src]]


def machine_in(state: TaskState, metrics: Metrics) -> StateMachine[TaskState]:
    new = functools.partial(task_lifecycle, structlog.get_logger(), metrics)
    return lifecycles.machine_in(new, ALLOWED, TaskState.CREATED, state)


def transitions_to(metrics: Metrics, state: TaskState) -> float:
    value = metrics.registry.get_sample_value("worker_task_transitions_total", {"to": state.value})
    return 0.0 if value is None else value


def test_a_new_task_starts_created() -> None:
    assert task_lifecycle(structlog.get_logger(), Metrics()).state is TaskState.CREATED


def test_every_state_has_a_row_and_closed_is_terminal() -> None:
    assert set(ALLOWED) == set(TaskState)
    assert ALLOWED[TaskState.CLOSED] == frozenset()
    assert all(TaskState.CLOSED in ALLOWED[s] for s in TaskState if s is not TaskState.CLOSED)


@pytest.mark.parametrize(("src", "dst"), ALLOWED_MOVES, ids=lambda s: s.value)
def test_every_allowed_transition_moves_the_state_and_is_counted(
    src: TaskState, dst: TaskState
) -> None:
    metrics = Metrics()
    machine = machine_in(src, metrics)
    before = transitions_to(metrics, dst)

    machine.transition(dst, reason="test")

    assert machine.state is dst
    assert transitions_to(metrics, dst) == before + 1


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN_MOVES, ids=lambda s: s.value)
def test_every_forbidden_transition_raises_and_changes_nothing(
    src: TaskState, dst: TaskState
) -> None:
    metrics = Metrics()
    machine = machine_in(src, metrics)
    before = transitions_to(metrics, dst)

    with (
        capture_logs() as logs,
        pytest.raises(IllegalTransition, match=f"{src.value} -> {dst.value}"),
    ):
        machine.transition(dst)

    assert machine.state is src
    assert transitions_to(metrics, dst) == before
    assert logs == []


def test_illegal_transition_is_a_worker_error() -> None:
    assert issubclass(IllegalTransition, WorkerError)


def test_a_transition_is_logged_with_the_bound_task_id_and_the_reason() -> None:
    with capture_logs() as logs:
        machine = task_lifecycle(structlog.get_logger().bind(task_id="0_3"), Metrics())
        machine.transition(TaskState.RESTORING, reason="assigned")

    assert logs == [
        {
            "event": TASK_TRANSITION,
            "log_level": "info",
            "task_id": "0_3",
            "src": "created",
            "dst": "restoring",
            "reason": "assigned",
        }
    ]


def test_the_corruption_path_leads_back_to_restoring() -> None:
    machine = machine_in(TaskState.RUNNING, Metrics())

    for state in (TaskState.CORRUPTED, TaskState.WIPED, TaskState.RESTORING, TaskState.RUNNING):
        machine.transition(state)

    assert machine.state is TaskState.RUNNING
