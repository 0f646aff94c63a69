"""The worker's lifecycle state machine and the readiness its status snapshot reports."""

from __future__ import annotations

import functools

import pytest
import structlog
from structlog.testing import capture_logs

from tests.support import lifecycles
from worker.errors import WorkerError
from worker.events import WORKER_TRANSITION
from worker.lifecycle import StateMachine
from worker.observability import Metrics
from worker.runtime.status import (
    ALLOWED,
    Status,
    TaskStatus,
    WorkerState,
    advertised_endpoint,
    worker_lifecycle,
)

ALLOWED_MOVES = [(src, dst) for src in WorkerState for dst in sorted(ALLOWED[src], key=str)]
FORBIDDEN_MOVES = [
    (src, dst)
    for src in WorkerState
    for dst in WorkerState
    if dst not in ALLOWED[src] and dst is not src
]


def machine_in(state: WorkerState, metrics: Metrics) -> StateMachine[WorkerState]:
    new = functools.partial(worker_lifecycle, structlog.get_logger(), metrics)
    return lifecycles.machine_in(new, ALLOWED, WorkerState.CREATED, state)


def gauge(metrics: Metrics) -> dict[str, float | None]:
    return {
        s.value: metrics.registry.get_sample_value("worker_state", {"state": s.value})
        for s in WorkerState
    }


def one_hot(state: WorkerState) -> dict[str, float | None]:
    return {s.value: 1.0 if s is state else 0.0 for s in WorkerState}


def test_a_new_worker_is_created_and_publishes_it() -> None:
    metrics = Metrics()

    machine = worker_lifecycle(structlog.get_logger(), metrics)

    assert machine.state is WorkerState.CREATED
    assert gauge(metrics) == one_hot(WorkerState.CREATED)


def test_every_state_has_a_row_and_not_running_is_terminal() -> None:
    assert set(ALLOWED) == set(WorkerState)
    assert ALLOWED[WorkerState.NOT_RUNNING] == frozenset()


@pytest.mark.parametrize(("src", "dst"), ALLOWED_MOVES, ids=lambda s: s.value)
def test_every_allowed_transition_moves_the_state_and_the_gauge(
    src: WorkerState, dst: WorkerState
) -> None:
    metrics = Metrics()
    machine = machine_in(src, metrics)

    machine.transition(dst)

    assert machine.state is dst
    assert gauge(metrics) == one_hot(dst)


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN_MOVES, ids=lambda s: s.value)
def test_every_forbidden_transition_raises_and_changes_nothing(
    src: WorkerState, dst: WorkerState
) -> None:
    metrics = Metrics()
    machine = machine_in(src, metrics)

    with pytest.raises(WorkerError, match=f"{src.value} -> {dst.value} is not allowed"):
        machine.transition(dst)

    assert machine.state is src
    assert gauge(metrics) == one_hot(src)


@pytest.mark.parametrize("state", list(WorkerState), ids=lambda s: s.value)
def test_a_transition_to_the_current_state_is_a_silent_no_op(state: WorkerState) -> None:
    machine = machine_in(state, Metrics())

    with capture_logs() as logs:
        machine.transition(state)

    assert machine.state is state
    assert logs == []


def test_a_transition_is_logged_with_source_and_target() -> None:
    with capture_logs() as logs:
        machine = worker_lifecycle(structlog.get_logger().bind(role="worker"), Metrics())
        machine.transition(WorkerState.STARTING, reason="run")

    assert logs == [
        {
            "event": WORKER_TRANSITION,
            "log_level": "info",
            "role": "worker",
            "src": "created",
            "dst": "starting",
            "reason": "run",
        }
    ]


def active(state: str, task_id: str = "0_0") -> TaskStatus:
    return TaskStatus(task_id, "active", state)


@pytest.mark.parametrize(
    ("status", "ready"),
    [
        (Status(), False),
        (Status(WorkerState.RUNNING), True),
        (Status(WorkerState.RUNNING, (active("running"), active("running", "0_1"))), True),
        (Status(WorkerState.RUNNING, (active("running"), active("restoring", "0_1"))), False),
        (Status(WorkerState.RUNNING, (active("suspended"),)), False),
        (Status(WorkerState.RUNNING, (TaskStatus("0_1", "standby", "restoring"),)), True),
        (Status(WorkerState.REBALANCING, (active("running"),)), False),
        (Status(WorkerState.STARTING), False),
        (Status(WorkerState.PENDING_SHUTDOWN, (active("running"),)), False),
        (Status(WorkerState.ERROR), False),
    ],
    ids=[
        "created",
        "running-no-tasks",
        "running-all-running",
        "running-one-restoring",
        "running-one-suspended",
        "running-standby-restoring",
        "rebalancing",
        "starting",
        "pending-shutdown",
        "error",
    ],
)
def test_ready_only_when_running_and_every_active_task_is_running(
    status: Status, ready: bool
) -> None:
    assert status.ready is ready


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_a_wildcard_host_is_never_advertised(wildcard: str) -> None:
    assert advertised_endpoint("", wildcard, 8080, lambda: "worker-7") == "worker-7:8080"
    assert advertised_endpoint("w.example:80", wildcard, 8080) == "w.example:80"
    assert advertised_endpoint("", "127.0.0.1", 8080) == "127.0.0.1:8080"
