"""Task roles and the task lifecycle as one explicit state machine.

    CREATED ──> RESTORING ──> RUNNING ──> SUSPENDED ──> CLOSED
       │            │            │  ^          │
       │            │            │  └──────────┘ (resumed by a new assignment)
       └────────────┴────────────┴──> CORRUPTED ──> WIPED ──> RESTORING

Actives restore before they run. Standbys and warmups run from the start: for them
RUNNING means "tailing the changelogs" (CREATED/WIPED -> RUNNING). A role change
(recycling) happens only while SUSPENDED and keeps the stores open.

Every move goes through the task's :class:`worker.lifecycle.StateMachine`, which raises on an illegal
move, logs ``task.transition`` with the task id bound, and counts it.
"""

from __future__ import annotations

import enum
from typing import Any

from worker.lifecycle import StateMachine
from worker.observability import Metrics


class TaskRole(enum.Enum):
    ACTIVE = "active"
    STANDBY = "standby"
    WARMUP = "warmup"
    INITIAL_STANDBY = "initial_standby"


class TaskState(enum.Enum):
    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CORRUPTED = "corrupted"
    WIPED = "wiped"
    CLOSED = "closed"


_S = TaskState
ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    _S.CREATED: frozenset({_S.RESTORING, _S.RUNNING, _S.CORRUPTED, _S.CLOSED}),
    _S.RESTORING: frozenset({_S.RUNNING, _S.SUSPENDED, _S.CORRUPTED, _S.CLOSED}),
    _S.RUNNING: frozenset({_S.SUSPENDED, _S.CORRUPTED, _S.CLOSED}),
    _S.SUSPENDED: frozenset({_S.RESTORING, _S.RUNNING, _S.CORRUPTED, _S.CLOSED}),
    _S.CORRUPTED: frozenset({_S.WIPED, _S.CLOSED}),
    _S.WIPED: frozenset({_S.RESTORING, _S.RUNNING, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}


def task_lifecycle(log: Any, metrics: Metrics) -> StateMachine[TaskState]:
    """A new task's state machine (CREATED), counted in ``worker_task_transitions_total``."""
    return StateMachine(
        "task", TaskState.CREATED, ALLOWED, log, transitions=metrics.task_transitions
    )
