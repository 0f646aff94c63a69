"""Corruption found at run time, reported for the processing thread to heal.

A corrupt block in a task's store shows only when something reads it: a record being
processed, a commit, a restore or standby batch, or an interactive query on an HTTP
thread. Whoever finds it reports the task here; the processing thread takes the reports
(:meth:`CorruptionReports.take`) and heals each task (:mod:`worker.tasks.healing`).

Thread-safety: :meth:`report` may be called from any thread; :meth:`take` from the
processing thread.
"""

from __future__ import annotations

import threading

from worker.assignment.task_id import TaskId


class CorruptionReports:
    """The tasks found corrupted since the last :meth:`take`, each with the first reason."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[TaskId, str] = {}

    def report(self, task_id: TaskId, reason: str) -> None:
        with self._lock:
            self._found.setdefault(task_id, reason)

    def discard(self, task_id: TaskId) -> None:
        """Forget reports about ``task_id``: its stores were just wiped, and a query that
        read the old ones while they closed may have reported after the last take."""
        with self._lock:
            self._found.pop(task_id, None)

    def take(self) -> dict[TaskId, str]:
        """Every report since the last call (checked without the lock while empty: the
        processing loop calls this every iteration)."""
        if not self._found:
            return {}
        with self._lock:
            found, self._found = self._found, {}
        return found
