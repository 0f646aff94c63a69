"""Free space on the state directory's file system: a gauge, and a warning before it is full.

A full disk is survived (a commit that cannot write fails and the tasks are revived from
their last commit, nothing lost), but nothing warned before it happened (issue 32).
:class:`DiskSpaceWatch` reads the file system's free bytes every
:data:`CHECK_INTERVAL_S` into ``worker_state_dir_free_bytes`` and, while they are below
``state.disk.min.free.bytes``, logs ``state.low_disk_space`` (at most once a minute);
``state.disk_space_recovered`` when they are back above. Alert on the gauge
(docs/operations.md): the log line is for whoever reads the log first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from worker.observability import Metrics, get_logger

CHECK_INTERVAL_S = 10.0
WARN_INTERVAL_S = 60.0


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on ``path``'s file system."""
    found = os.statvfs(path)
    return found.f_bavail * found.f_frsize


class DiskSpaceWatch:
    """Follows the free space under ``path``; processing thread only. ``min_free_bytes``
    0: the gauge only, no warning."""

    def __init__(
        self,
        path: Path,
        min_free_bytes: int,
        metrics: Metrics,
        measure: Callable[[Path], int] = free_bytes,
    ) -> None:
        self._path = path
        self._min_free = min_free_bytes
        self._gauge = metrics.state_dir_free_bytes
        self._measure = measure
        self._next_check = float("-inf")
        self._next_warning = float("-inf")
        self._low = False
        self._log = get_logger(component="state_directory")

    def check(self, now: float) -> None:
        """Measure when :data:`CHECK_INTERVAL_S` has passed since the last time (``now``:
        the loop's monotonic clock). A file system that cannot be read is logged and
        measured again next time."""
        if now < self._next_check:
            return
        self._next_check = now + CHECK_INTERVAL_S
        try:
            free = self._measure(self._path)
        except OSError as exc:
            self._log.warning("state.disk_space_unknown", path=str(self._path), error=str(exc))
            return
        self._gauge.set(free)
        low = free < self._min_free
        if low and now >= self._next_warning:
            self._next_warning = now + WARN_INTERVAL_S
            self._log.warning(
                "state.low_disk_space",
                path=str(self._path),
                free_bytes=free,
                min_free_bytes=self._min_free,
            )
        elif self._low and not low:
            self._next_warning = float("-inf")
            self._log.info("state.disk_space_recovered", path=str(self._path), free_bytes=free)
        self._low = low
