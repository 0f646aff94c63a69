"""When the worker runs (and /readyz answers 200): as Kafka Streams' RUNNING, once the
group's round is over and what it gave this instance is active and restored. An empty
assignment in a settled group is ready; one that is empty only until the old owners
release what the round moves here is not (worker/tasks/handover.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.config import load
from worker.kafka.member_states import Assigned, Lost
from worker.processing.topology import BuiltTopology
from worker.runtime.status import WorkerState
from worker.runtime.worker import Worker
from worker.tasks.state import TaskRole

ME, OTHER = "p-me", "p-other"
A, B = TaskId(0, 0), TaskId(0, 1)


class Group:
    """What the worker reads of its group member and its tasks, as plain values."""

    def __init__(self) -> None:
        self.settled = False
        self.active: frozenset[TaskId] = frozenset()
        self.restoring = False
        self.member_id = ""

    def handed_over(self) -> None:
        pass

    def runtime(self) -> Any:
        tasks = SimpleNamespace(restoring=lambda: self.restoring, all_running=lambda: True)
        manager = SimpleNamespace(
            on_assigned=lambda assignment, incoming: False,
            on_lost=lambda: None,
            tasks_by_role=lambda *roles: self.active if roles == (TaskRole.ACTIVE,) else set(),
        )
        return SimpleNamespace(
            member=self,
            parts=SimpleNamespace(tasks=tasks, manager=manager),
            state_dir=SimpleNamespace(process_id=ME),
            loop=SimpleNamespace(probes=SimpleNamespace(on_assignment=lambda assignment: None)),
        )


@pytest.fixture
def worker(tmp_path: Path) -> Worker:
    values = {"application.id": "ready", "state.dir": str(tmp_path)}
    settings = load(None, values, environ={}).settings
    worker = Worker(settings, cast(BuiltTopology, None), clock=FakeClock())
    worker._set_state(WorkerState.STARTING)
    worker._set_state(WorkerState.REBALANCING)
    return worker


def _assigned(
    worker: Worker, group: Group, active: frozenset[TaskId], moves: dict[TaskId, str]
) -> None:
    assignment = Assignment(active, frozenset(), frozenset(), {}, {}, pending_moves=moves)
    worker._on_membership(group.runtime(), [Assigned(assignment, frozenset())])
    group.active = active


def _ready(worker: Worker, group: Group) -> bool:
    worker._follow_group(group.runtime(), worker.clock.monotonic())
    return worker.status().ready


def test_a_worker_is_not_ready_until_its_member_settled_an_assignment(worker: Worker) -> None:
    group = Group()
    group.settled = True  # in a settled group, but no assignment applied yet
    assert not _ready(worker, group)
    group.settled = False
    _assigned(worker, group, frozenset({A}), {})
    assert not _ready(worker, group)  # assigned, but a round is under way or due
    group.settled = True
    assert _ready(worker, group)


def test_an_empty_assignment_in_a_settled_group_is_ready(worker: Worker) -> None:
    group = Group()
    group.settled = True
    _assigned(worker, group, frozenset(), {A: OTHER})  # a move elsewhere is not ours
    assert _ready(worker, group)
    assert worker.status().tasks == ()


def test_tasks_moved_here_keep_the_worker_unready_until_they_are_active_and_restored(
    worker: Worker,
) -> None:
    group = Group()
    group.settled = True
    _assigned(worker, group, frozenset(), {A: ME, B: ME})  # the old owner still has them
    assert not _ready(worker, group)
    group.active = frozenset({A})  # A taken over on its release
    assert not _ready(worker, group)
    group.active, group.restoring = frozenset({A, B}), True
    assert not _ready(worker, group)
    group.restoring = False
    assert _ready(worker, group)


def test_a_follow_up_round_that_gives_a_moved_task_here_makes_the_worker_ready(
    worker: Worker,
) -> None:
    group = Group()
    group.settled = True
    _assigned(worker, group, frozenset(), {A: ME})  # stateless: nobody holds it meanwhile
    assert not _ready(worker, group)
    _assigned(worker, group, frozenset({A}), {})
    assert _ready(worker, group)


def test_a_running_worker_whose_member_learns_of_a_round_or_is_dropped_is_unready(
    worker: Worker,
) -> None:
    group = Group()
    group.settled = True
    _assigned(worker, group, frozenset({A}), {})
    assert _ready(worker, group)
    group.settled = False  # a heartbeat said the group rebalances
    assert not _ready(worker, group)
    assert worker.status().state is WorkerState.REBALANCING
    worker._on_membership(group.runtime(), [Lost(frozenset({A}))])
    group.active = frozenset()
    assert not _ready(worker, group)
