"""The worker's lifecycle state machine and the snapshot the HTTP thread reads.

The processing thread is the only writer; it publishes an immutable :class:`Status` after
every change, and HTTP handlers read the latest one without locks (a reference swap is
atomic in CPython). Besides the worker's state the snapshot carries what interactive
queries and ``/tasks`` need: every local task with its stores' committed offsets and its
lag (:func:`task_status`), and the routing metadata of the latest assignment
(:class:`Routing`).

The one live object in it is :attr:`StoreStatus.store`: other threads may call only
``Store.get_committed`` on it, which is safe against the owner closing the store at any
moment (it then raises ``StoreClosedError``).
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.endpoint import bracketed, is_wildcard
from worker.lifecycle import StateMachine
from worker.observability import Metrics

if TYPE_CHECKING:
    from worker.tasks.task import Task


class WorkerState(enum.Enum):
    """Where the worker's run is. ERROR: the run failed with a fatal error; what it started
    is being released and the process exits with the error (never left for RUNNING)."""

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
class StoreStatus:
    """One store of a local task as the processing thread last saw it.

    ``offset`` is the changelog offset committed with the store's data (the last record
    applied), None when the store has none yet. ``store`` is the live store for
    interactive queries: call only its thread-safe ``get_committed`` from other threads.
    """

    name: str
    changelog: str
    partition: int
    offset: int | None
    store: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TaskStatus:
    """One local task. ``lag``: changelog records its stores are behind the end, for
    tasks reading a changelog (standbys, warmups, restoring actives); None otherwise
    (running actives write their changelogs) or while unknown. ``unavailable_seconds``:
    cause -> seconds the task was active here with input waiting and processed nothing
    (:mod:`worker.runtime.availability`), the same numbers as the counter."""

    task_id: str
    kind: str
    state: str
    stores: tuple[StoreStatus, ...] = ()
    lag: int | None = None
    unavailable_seconds: Mapping[str, float] = field(default_factory=dict)


def _frozen_hosts(hosts: Mapping[str, frozenset[TaskId]]) -> Mapping[str, frozenset[TaskId]]:
    return MappingProxyType({endpoint: frozenset(tasks) for endpoint, tasks in hosts.items()})


@dataclass(frozen=True)
class Routing:
    """Where tasks live, for interactive-query routing.

    ``endpoint`` is how other instances reach this one (``application.server``, else
    ``http.host`` and the port the HTTP server really bound). ``active_hosts`` and
    ``standby_hosts`` (warmups included) map each instance's endpoint to its tasks, from
    the latest assignment (``generation``); when it carried none (user data version 2
    on any member but the directory) they are empty and ``directory`` names the
    endpoint that serves them (:mod:`worker.http.directory`). ``partitions`` is the
    number of tasks of each sub-topology, known once the topics have been checked at
    start-up.
    """

    endpoint: str = ""
    active_hosts: Mapping[str, frozenset[TaskId]] = field(default_factory=dict)
    standby_hosts: Mapping[str, frozenset[TaskId]] = field(default_factory=dict)
    generation: int = -1
    partitions: Mapping[int, int] = field(default_factory=dict)
    directory: str = ""

    def with_assignment(self, assignment: Assignment) -> Routing:
        return replace(
            self,
            active_hosts=_frozen_hosts(assignment.active_hosts),
            standby_hosts=_frozen_hosts(assignment.standby_hosts),
            generation=assignment.generation,
            directory=assignment.directory,
        )

    def with_partitions(self, partitions: Mapping[int, int]) -> Routing:
        return replace(self, partitions=MappingProxyType(dict(partitions)))

    def active_host(self, task_id: TaskId) -> str | None:
        """The endpoint the latest assignment gave ``task_id``'s active to, if any."""
        return next((e for e, tasks in sorted(self.active_hosts.items()) if task_id in tasks), None)

    def standby_hosts_of(self, task_id: TaskId) -> list[str]:
        return sorted(e for e, tasks in self.standby_hosts.items() if task_id in tasks)


def advertised_endpoint(
    application_server: str,
    http_host: str,
    bound_port: int,
    hostname: Callable[[], str] = socket.gethostname,
) -> str:
    """The endpoint this instance announces: ``application.server`` if set, else the
    HTTP host with the port actually bound (``http.port = 0`` picks one). A wildcard
    host (``0.0.0.0``, ``::``) is never announced: nobody can reach an instance there,
    so the machine's host name stands in (a container's name in Docker's network) and
    the worker warns that ``application.server`` should say it (issue 32)."""
    if application_server:
        return application_server
    host = hostname() if is_wildcard(http_host) else http_host
    return f"{bracketed(host)}:{bound_port}"


LagFn = Callable[[TaskId], int | None]

_NEVER_STALLED: Mapping[str, float] = MappingProxyType({})


def task_status(
    task: Task, lag: LagFn, unavailable: Mapping[str, float] = _NEVER_STALLED
) -> TaskStatus:
    """A task as the snapshot shows it. Call on the processing thread only.

    ``unavailable`` is ``AvailabilityTracker.unavailable_seconds`` of the task; it is
    copied, so the snapshot does not change under the HTTP thread.
    """
    stores = []
    for name, store in task.stores.items():
        topic, partition = task.changelogs[name]
        offset = store.committed_offsets().get((topic, partition))
        stores.append(StoreStatus(name, topic, partition, offset, store))
    return TaskStatus(
        str(task.id),
        task.role.value,
        task.state.value,
        tuple(stores),
        lag(task.id),
        MappingProxyType(dict(unavailable)),
    )


# How often the loop rebuilds the task list (offsets, lags) when nothing else changed.
REFRESH_SECONDS = 0.25
# A loop that has not come round for this long is not processing: not ready. Every
# iteration is bounded (a consume batch, a restore batch, a commit), so only a call that
# waits on an unanswering broker, or a rebalance (not ready anyway), takes this long.
LOOP_STALL_SECONDS = 5.0
# A loop that has not come round for this long is stuck for good: not alive (/healthz
# 503), so the orchestrator restarts the process.
HEALTH_STALE_SECONDS = 60.0


def no_lag(task_id: TaskId) -> int | None:
    """The lag function before the changelog reader exists: unknown."""
    return None


@dataclass(frozen=True)
class Status:
    state: WorkerState = WorkerState.CREATED
    tasks: tuple[TaskStatus, ...] = ()
    heartbeat: float = 0.0
    routing: Routing = field(default_factory=Routing)
    # When ``tasks`` was last rebuilt (``heartbeat`` moves every loop iteration).
    published: float = 0.0
    # False while the group member cannot reach its coordinator (the broker is away).
    broker_connected: bool = True
    # Set by :meth:`judged` when the worker hands out the snapshot: ``stalled`` once the
    # loop has not come round for LOOP_STALL_SECONDS (blocked in a call to a broker that
    # does not answer, say), ``alive`` False after HEALTH_STALE_SECONDS or in ERROR.
    stalled: bool = False
    alive: bool = True

    def task(self, task_id: TaskId) -> TaskStatus | None:
        key = str(task_id)
        return next((t for t in self.tasks if t.task_id == key), None)

    def judged(self, now: float) -> Status:
        """This snapshot with its liveness judged at ``now``, a reading of the clock that
        wrote ``heartbeat`` (the worker's injected clock): the one place liveness and the
        loop's stall are decided."""
        age = now - self.heartbeat
        stalled = age > LOOP_STALL_SECONDS
        alive = age < HEALTH_STALE_SECONDS and self.state is not WorkerState.ERROR
        if (stalled, alive) == (self.stalled, self.alive):
            return self
        return replace(self, stalled=stalled, alive=alive)

    @property
    def ready(self) -> bool:
        """Ready when running (the group settled and every task it moved here taken over:
        ``Worker._follow_group``), connected to the broker, and every active task is
        processing (not restoring)."""
        return (
            self.state is WorkerState.RUNNING
            and self.broker_connected
            and not self.stalled
            and all(t.state == "running" for t in self.tasks if t.kind == "active")
        )


def worker_lifecycle(log: Any, metrics: Metrics) -> StateMachine[WorkerState]:
    """The worker's state machine (CREATED), shown by the ``worker_state`` gauge. The loop
    samples the state every iteration, so a move to the current state is a no-op."""
    return StateMachine(
        "worker", WorkerState.CREATED, ALLOWED, log, gauge=metrics.worker_state, repeat_ok=True
    )
