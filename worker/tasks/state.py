"""Task roles and the task lifecycle as one explicit state machine.

    CREATED ──> RESTORING ──> RUNNING ──> SUSPENDED ──> CLOSED
       │            │            │  ^          │
       │            │            │  └──────────┘ (resumed by a new assignment)
       └────────────┴────────────┴──> CORRUPTED ──> WIPED ──> RESTORING

Actives restore before they run. Standbys and warmups run from the start: for them
RUNNING means "tailing the changelogs" (CREATED/WIPED -> RUNNING). A role change
(recycling) happens only while SUSPENDED and keeps the stores open.

Every move goes through :meth:`TaskStateMachine.transition`, which raises on an illegal
move, logs ``task.transition`` with the task id bound, and counts it.
"""

from __future__ import annotations

import enum
from typing import Any

from worker.errors import WorkerError
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


class IllegalTransition(WorkerError):
    """A lifecycle bug: the code tried a move the state machine forbids."""


class TaskStateMachine:
    """Holds one task's state; the only way to change it is ``transition``."""

    __slots__ = ("_state", "log", "_metrics")

    def __init__(self, log: Any, metrics: Metrics) -> None:
        self._state = TaskState.CREATED
        self.log = log  # rebound when the task changes role
        self._metrics = metrics

    @property
    def state(self) -> TaskState:
        return self._state

    def transition(self, target: TaskState, reason: str = "") -> None:
        """Move to ``target``; raise IllegalTransition if the table forbids it."""
        if target not in ALLOWED[self._state]:
            raise IllegalTransition(f"{self._state.value} -> {target.value} is not allowed")
        self.log.info("task.transition", src=self._state.value, dst=target.value, reason=reason)
        self._state = target
        self._metrics.task_transitions.labels(to=target.value).inc()
