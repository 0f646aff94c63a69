"""The worker's lifecycle state machine and the snapshot the HTTP thread reads.

The processing thread is the only writer; it publishes an immutable :class:`Status` after
every change, and HTTP handlers read the latest one without locks (a reference swap is
atomic in CPython).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from worker.errors import WorkerError
from worker.observability import Metrics


class WorkerState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    REBALANCING = "rebalancing"
    RUNNING = "running"
    PENDING_SHUTDOWN = "pending_shutdown"
    NOT_RUNNING = "not_running"
    ERROR = "error"


_W = WorkerState
ALLOWED: dict[WorkerState, frozenset[WorkerState]] = {
    _W.CREATED: frozenset({_W.STARTING, _W.PENDING_SHUTDOWN, _W.ERROR}),
    _W.STARTING: frozenset({_W.REBALANCING, _W.PENDING_SHUTDOWN, _W.ERROR}),
    _W.REBALANCING: frozenset({_W.RUNNING, _W.PENDING_SHUTDOWN, _W.ERROR}),
    _W.RUNNING: frozenset({_W.REBALANCING, _W.PENDING_SHUTDOWN, _W.ERROR}),
    _W.PENDING_SHUTDOWN: frozenset({_W.NOT_RUNNING, _W.ERROR}),
    _W.NOT_RUNNING: frozenset(),
    _W.ERROR: frozenset({_W.PENDING_SHUTDOWN, _W.NOT_RUNNING}),
}


@dataclass(frozen=True)
class TaskStatus:
    task_id: str
    kind: str
    state: str


@dataclass(frozen=True)
class Status:
    state: WorkerState = WorkerState.CREATED
    tasks: tuple[TaskStatus, ...] = ()
    heartbeat: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Ready when running and every active task is processing (not restoring)."""
        return self.state is WorkerState.RUNNING and all(
            t.state == "running" for t in self.tasks if t.kind == "active"
        )


class WorkerStateMachine:
    def __init__(self, log: Any, metrics: Metrics) -> None:
        self.state = WorkerState.CREATED
        self._log = log
        self._metrics = metrics
        self._publish_gauge()

    def transition(self, target: WorkerState) -> None:
        if target is self.state:
            return
        if target not in ALLOWED[self.state]:
            raise WorkerError(f"worker: {self.state.value} -> {target.value} is not allowed")
        self._log.info("worker.transition", src=self.state.value, dst=target.value)
        self.state = target
        self._publish_gauge()

    def _publish_gauge(self) -> None:
        for state in WorkerState:
            self._metrics.worker_state.labels(state=state.value).set(
                1 if state is self.state else 0
            )
