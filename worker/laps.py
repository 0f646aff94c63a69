"""Where a slow step of the processing thread spent its time, as one log line.

Every active task of the worker stops while the processing thread is busy elsewhere: a
loop iteration that runs long (``loop.slow_iteration``) or a commit that waits on the
broker (``transaction.slow_commit``) is a stall of tasks that kept their owner through
a rebalance. The line names the parts that took the time (member poll, applying an
assignment, consume, process, flush, offsets...), so such a stall can be traced without
a profiler (docs/platform-notes.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.observability import get_logger

# A step longer than this is logged: several times a normal one (``poll.ms``, the
# longest an idle iteration waits, is 100 ms by default) and short enough to show a
# pause a reader of the output would notice.
SLOW_ITERATION_S = 0.3
# Parts shorter than this are left out of the line.
SHOWN_PART_S = 0.01


class Laps:
    """Times the parts of one step; ``start`` at its top, ``lap`` after each part,
    ``finish`` at its end, which logs ``event`` when the step took ``slow_s`` or more.
    Single-threaded (the processing thread)."""

    def __init__(
        self,
        event: str,
        monotonic: Callable[[], float],
        slow_s: float = SLOW_ITERATION_S,
        **bound: Any,
    ) -> None:
        self._event = event
        self._monotonic = monotonic
        self._slow_s = slow_s
        self._log = get_logger(**bound)
        self._started = monotonic()
        self._last = self._started
        self._parts: dict[str, float] = {}

    def start(self) -> None:
        self._started = self._last = self._monotonic()
        self._parts = {}

    def lap(self, part: str) -> None:
        """The time since the previous lap (or the start) was spent in ``part``."""
        now = self._monotonic()
        self._parts[part] = self._parts.get(part, 0.0) + now - self._last
        self._last = now

    def finish(self, **context: Any) -> float:
        """Log the step if it was slow; returns its length (s)."""
        total = self._monotonic() - self._started
        if total >= self._slow_s:
            shown = {k: round(v, 3) for k, v in self._parts.items() if v >= SHOWN_PART_S}
            self._log.info(self._event, seconds=round(total, 3), parts=shown, **context)
        return total
