"""Heals tasks whose stores were found corrupted at run time; the other tasks go on.

RocksDB finds a corrupt block only when it reads it, so a store that opened fine can
fail later: processing a record, committing, restoring or tailing a changelog, or
answering an interactive query. Every one of those ends here, as "this task is
corrupted" (the router and the restore path directly, commits and queries through
:class:`~worker.tasks.corruption.CorruptionReports`), and the task is healed as one
found corrupted at open is: its local state is thrown away and rebuilt from its
changelogs, which hold everything committed. Nothing else stops, and nothing the worker
does next reads the bad file again, so a corrupt block can never crash-loop it.

Processing thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from worker.assignment.task_id import TaskId
from worker.events import TASK_CORRUPTED
from worker.tasks.committer import TaskCommitter
from worker.tasks.registry import Tasks
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task

WIPE_REASON = "corrupt_read"


class TaskHealer:
    """Closes corrupted tasks dirty and wipes them; copies restore, actives are given back
    to the group (see :meth:`heal`)."""

    def __init__(
        self,
        tasks: Tasks,
        committer: TaskCommitter,
        request_rebalance: Callable[[str], None] | None = None,
    ) -> None:
        self._tasks = tasks
        self._committer = committer
        self._request_rebalance = request_rebalance

    def heal_reported(self) -> None:
        """Heal every task reported corrupted since the last call (once per loop step)."""
        found = self._tasks.ctx.corruption.take()
        for task, reason in self._tasks.take_corrupted():
            found.setdefault(task.id, reason)
        if found:
            self.heal(found)

    def heal(self, found: Mapping[TaskId, str]) -> None:
        """Heal the tasks of ``found`` (task id -> what was found), in order:

        1. Keep those still open here in a state that can be wiped (a report can come
           after the task closed or was just wiped: nothing left to heal).
        2. When one of them is a running active, drop the output of the open commit
           where the guarantee can (exactly-once aborts the transaction); every other
           running active then lost its uncommitted work too and is revived.
        3. Each corrupted task: stop its inputs and drop its uncommitted work; an active
           becomes a standby here (recycled: it processes nothing until the group says
           where it runs); close its stores dirty, delete its directory's contents and
           open them empty (``worker_state_wipes_total{reason="corrupt_read"}``), then
           tail its changelogs from the beginning. An initial standby, not started yet,
           waits for the assignment wiped.
        4. When an active was healed, ask the group for a rebalance. This instance now
           reports the task as a standby with what it has read back, so the assignment's
           usual rules decide: a caught-up standby elsewhere takes it over at once (this
           instance no longer claims it, and no longer processes it: never two owners),
           or it comes back here and, recycled into an active, restores only what its
           standby has not read yet.
        """
        tasks = [
            task
            for task_id in sorted(found)
            if (task := self._tasks.by_id.get(task_id)) is not None
            and task.state not in (TaskState.CLOSED, TaskState.WIPED, TaskState.CORRUPTED)
        ]
        if not tasks:
            return
        running = self._tasks.running_actives()
        if any(t in running for t in tasks) and self._committer.abort():
            others = [t for t in running if t not in tasks]
            if others:
                self._tasks.revive(others, WIPE_REASON, "a corrupted task's transaction aborted")
        demoted = [self._heal(task, found[task.id]) for task in tasks]
        self._tasks.publish_kinds()
        self._tasks.on_change()
        if self._request_rebalance is not None and any(demoted):
            self._request_rebalance("task corrupted")

    def _heal(self, task: Task, reason: str) -> bool:
        """Step 3 for one task; True when it was an active (now a standby)."""
        started = task.state is not TaskState.CREATED
        task.log.warning(TASK_CORRUPTED, reason=reason, state=task.state.value)
        self._tasks.stop_inputs(task)
        task.discard_uncommitted()
        demoted = task.is_active
        if demoted:
            if task.state is not TaskState.SUSPENDED:
                task.transition(TaskState.SUSPENDED, "corrupted")
            task.recycle(TaskRole.STANDBY)
        task.transition(TaskState.CORRUPTED, reason)
        task.wipe(WIPE_REASON)
        # The old stores are closed now: no read of them can report any more, and what
        # reads of them reported since the last take is about files just deleted.
        self._tasks.ctx.corruption.discard(task.id)
        if started:
            self._tasks.start(task)
        return demoted
