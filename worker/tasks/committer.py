"""Runs the commit across the running active tasks and drops what cannot be committed.

The protocol itself (what a commit does under each guarantee) is chosen once, by
:func:`worker.runtime.guarantee.choose_guarantee`; this module decides when its outcome
revives tasks and keeps the ``.checkpoint`` files in step with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from worker.assignment.task_id import TP
from worker.errors import RebalanceInProgress, StoreCorrupted, TaskCorrupted
from worker.observability import get_logger
from worker.tasks.commit_protocols import (
    GENERATION_MOVED,
    CommitFailed,
    CommitProtocol,
    Releases,
)
from worker.tasks.registry import Tasks
from worker.tasks.state import TaskState
from worker.tasks.task import Task


class TaskCommitter:
    """Commits every running active task together; single-threaded (processing thread)."""

    def __init__(self, tasks: Tasks, protocol: CommitProtocol) -> None:
        self._tasks = tasks
        self._protocol = protocol
        self._log = get_logger(component="committer")
        # Told the source offsets of each successful commit, and {} on every commit call
        # that had nothing to commit (the repartition purge: it settles its requests then).
        self.on_committed: Callable[[Mapping[TP, int]], None] = _ignore

    def commit(self, releases: Releases = ()) -> bool:
        """Commit every running active task with the guarantee's protocol (tasks/commit_protocols.py),
        then rewrite the ``.checkpoint`` files whose interval has passed.

        A commit that cannot complete drops the uncommitted work of every running task
        that had some and revives those from their last committed state (a log line and
        ``worker_task_revivals_total``); the process keeps going. One the group cannot
        take yet (it is syncing; nothing was sent) waits for the next. Each outcome is
        counted in ``worker_commits_total{result}``: committed, deferred, or the
        failure's reason. Returns False when there was nothing to commit or the commit
        did not happen; a task whose store met corruption is reported for healing
        (worker/tasks/healing.py). ``releases`` (release markers, worker/tasks/handover.py) go with
        the commit, even one with nothing else in it. Raises TaskMigrated when the group
        went on without this instance.
        """
        self._checkpoint_standbys()
        running = self._tasks.running_actives()
        pending = [t for t in running if t.needs_commit()]
        if not releases and not pending:
            self.on_committed({})
            return False
        metrics = self._tasks.ctx.metrics
        try:
            with metrics.commit_seconds.time():
                offsets = self._protocol(running, releases)
        except RebalanceInProgress as exc:
            self._log.info("commit.deferred", reason=str(exc))
            metrics.commits.labels(result="deferred").inc()
            return False
        except (CommitFailed, TaskCorrupted) as exc:
            reason = exc.reason if isinstance(exc, CommitFailed) else "corrupted"
            self._log.warning("commit.failed", reason=reason, error=str(exc))
            metrics.commits.labels(result=reason).inc()
            if isinstance(exc, TaskCorrupted):
                # Met before the commit was sent: drop what was sent, heal the task.
                self._protocol.abort()
                for task_id in exc.task_ids:
                    self._tasks.ctx.corruption.report(task_id, exc.reason)  # type: ignore[arg-type]
            # Only the tasks with work since their last commit lost something; the
            # others had nothing in it and go on as they are.
            # A commit the group refused never committed: its transaction is aborted and
            # the stores hold what the changelogs do, so no restore is needed.
            current = reason == GENERATION_MOVED
            self._tasks.revive(pending, reason, str(exc), stores_current=current)
            return False
        for task in running:
            task.mark_sources_committed(offsets)
            self._maybe_checkpoint(task)
        metrics.commits.labels(result="committed").inc()
        self.on_committed(offsets)
        return True

    def abort(self) -> bool:
        """Drop what was sent since the last commit where the guarantee can (see
        ``CommitProtocol.abort``): True when every running task must be revived."""
        return self._protocol.abort()

    def discard_uncommitted(self) -> None:
        """Drop what every task processed since the last commit (aborted under exactly-once)."""
        self._protocol.abort()
        for task in self._tasks.by_id.values():
            task.discard_uncommitted()

    def _checkpoint_standbys(self) -> None:
        """Standby stores commit each batch they apply; only their .checkpoint lags behind."""
        for task in self._tasks.by_id.values():
            if not task.is_active and task.state is TaskState.RUNNING:
                self._maybe_checkpoint(task)

    def _maybe_checkpoint(self, task: Task) -> None:
        """A checkpoint flushes the memtables: a store whose RocksDB met corruption in
        the background (a compaction read a bad block) fails here; heal it."""
        try:
            task.maybe_write_checkpoint()
        except StoreCorrupted as exc:
            self._tasks.ctx.corruption.report(task.id, exc.reason)


def _ignore(offsets: Mapping[TP, int]) -> None:
    return None
