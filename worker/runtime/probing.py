"""When this instance asks the group to rebalance: a warmup caught up, or the probe is due.

KIP-441 moves an active task only to an instance that has caught up. The leader places
warmups and names a probing time; this instance asks for the follow-up rebalance as soon
as any of its warmups is within ``acceptable.recovery.lag``, or at the probing time at
the latest. At most one request per assignment: the request itself starts the rebalance
that brings the next assignment.
"""

from __future__ import annotations

from typing import Protocol

from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.clock import Clock
from worker.observability import Metrics, get_logger

# Lags are read from the restore consumer's cached watermarks; once a second is plenty.
CHECK_INTERVAL_S = 1.0


class RebalanceRequester(Protocol):
    def request_rebalance(self, reason: str) -> None: ...


class WarmupSource(Protocol):
    def warmups_caught_up(self, acceptable_lag: int) -> list[TaskId]: ...


class ProbeScheduler:
    def __init__(self, acceptable_lag: int, clock: Clock, metrics: Metrics) -> None:
        self._acceptable = acceptable_lag
        self._clock = clock
        self._metrics = metrics
        self._next_probe_ms = -1
        self._requested = True  # nothing to probe before the first assignment
        self._last_check = float("-inf")
        self._log = get_logger(component="probing")

    def on_assignment(self, assignment: Assignment) -> None:
        self._next_probe_ms = assignment.next_probe_ms
        self._requested = False

    def check(self, warmups: WarmupSource, member: RebalanceRequester) -> None:
        """Called every loop iteration; does real work at most once a second."""
        now = self._clock.monotonic()
        if self._requested or now - self._last_check < CHECK_INTERVAL_S:
            return
        self._last_check = now
        caught_up = warmups.warmups_caught_up(self._acceptable)
        if caught_up:
            self._metrics.warmups_caught_up.inc(len(caught_up))
            self._request(member, "warmup caught up", tasks=[str(t) for t in caught_up])
        elif 0 <= self._next_probe_ms <= self._clock.wall() * 1000:
            self._request(member, "probing interval elapsed", tasks=[])

    def _request(self, member: RebalanceRequester, reason: str, tasks: list[str]) -> None:
        self._requested = True
        self._log.info("probing.request", reason=reason, tasks=tasks)
        member.request_rebalance(reason)
