"""Whether each active task has input waiting, and what keeps it from processing it.

Builds the :class:`TaskSample` of every active task for the availability tracker
(:mod:`worker.runtime.availability`), without ever blocking the loop:

- a task that consumes compares the end of each source partition, as its last fetch
  reported it (``DataConsumer.high_watermark``: no request), with its next position;
- a task that does not consume yet (restoring, reviving, handed over) has no fetch to
  read an end from: the ends of its partitions come from a ListOffsets request started
  here and collected on a later observation (``Admin.request_end_offsets``), at most
  once every ``END_REFRESH_S``. Its position is the last one this process knew; a task
  whose position is not known here yet (just assigned) counts as having input waiting
  when its partitions hold any record: the restore it waits for would delay that input.

The cause, first match wins: restoring after a revival -> ``revive``; restoring ->
``restore``; handed over or being recycled -> ``rebalance``; fetching stopped for full
buffers -> ``backpressure``; the broker unreachable -> ``broker``; the group rebalancing
-> ``rebalance``; else none (the tracker's ``other``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from worker.assignment.task_id import TP
from worker.clock import Clock
from worker.kafka.admin import PendingOffsets
from worker.runtime.availability import StallCause, TaskSample
from worker.tasks.state import TaskState
from worker.tasks.task import Task

END_REFRESH_S = 1.0


@dataclass(frozen=True, slots=True)
class LoopConditions:
    """What the loop knows about everything that is not one task's own state."""

    rebalancing: bool
    broker_connected: bool
    backpressure: bool
    # Tasks whose partition group holds records back for an empty partition.
    idling: frozenset[str] = frozenset()


class InputWatch:
    """Samples for the availability tracker; one thread (the processing loop)."""

    def __init__(
        self,
        high_watermark: Callable[[TP], int | None],
        request_end_offsets: Callable[[Iterable[TP]], PendingOffsets] | None,
        clock: Clock,
    ) -> None:
        self._high_watermark = high_watermark
        self._request = request_end_offsets
        self._clock = clock
        self._ends: dict[TP, int] = {}
        self._pending: PendingOffsets | None = None
        self._asked_at = float("-inf")

    def samples(self, tasks: Iterable[Task], conditions: LoopConditions) -> Iterator[TaskSample]:
        """One sample per active task (lazily: the tracker iterates only when due)."""
        self._collect()
        idle: list[Task] = []
        for task in tasks:
            if not task.is_active:
                continue
            consuming = task.state is TaskState.RUNNING
            if not consuming:
                idle.append(task)
            yield TaskSample(
                str(task.id),
                task.progress(),
                self._waiting(task, consuming),
                _cause(task, conditions),
            )
        self._refresh([tp for task in idle for tp in task.source_partitions])

    def _waiting(self, task: Task, consuming: bool) -> bool:
        positions = task.next_positions()
        for tp in task.source_partitions:
            end = self._high_watermark(tp) if consuming else self._ends.get(tp)
            if end is None:
                continue
            position = positions.get(tp)
            if end > (position if position is not None else 0):
                return True
        return False

    def _collect(self) -> None:
        if self._pending is not None and self._pending.ready():
            self._ends.update(self._pending.result())
            self._pending = None

    def _refresh(self, partitions: list[TP]) -> None:
        """Ask for the ends of the partitions not consumed, when it is time."""
        now = self._clock.monotonic()
        if (
            partitions
            and self._request is not None
            and self._pending is None
            and now - self._asked_at >= END_REFRESH_S
        ):
            self._asked_at = now
            try:
                self._pending = self._request(partitions)
            except Exception:  # unreachable broker: the tracker sees no input, charges nothing
                self._pending = None


def _cause(task: Task, conditions: LoopConditions) -> StallCause | None:
    if task.state is TaskState.RESTORING:
        return StallCause.REVIVE if task.revived else StallCause.RESTORE
    if task.state is not TaskState.RUNNING:
        return StallCause.REBALANCE
    if conditions.backpressure:
        return StallCause.BACKPRESSURE
    if not conditions.broker_connected:
        return StallCause.BROKER
    if conditions.rebalancing:
        return StallCause.REBALANCE
    if str(task.id) in conditions.idling:
        return StallCause.TASK_IDLE
    return None
