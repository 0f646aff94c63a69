"""Per-task availability: seconds in which an active task could have worked and did not.

This is the number users read in ``/tasks`` (``unavailable_seconds``) and in Grafana
(``worker_task_unavailable_seconds_total{task, cause}``), so the rule is exact and
written down here. The processing loop hands :meth:`AvailabilityTracker.observe` one
:class:`TaskSample` per active task on every iteration; the tracker does its work at most
every ``interval`` seconds (an *observation*). For two consecutive observations of the
same task, at ``t0 < t1`` on the monotonic clock:

1. if the task's ``processed`` count at ``t1`` differs from the one at ``t0`` (grew, or
   dropped because the task object was recreated), the task made progress: nothing is
   charged;
2. else, if the ``t0`` sample said input was waiting, ``t1 - t0`` is charged to a cause:
   the ``t0`` sample's cause; when that is None, the ``t1`` sample's cause (the stall
   began after ``t0`` and the loop learnt why only by ``t1``, typically a blocking call
   such as a group join); when both are None, :attr:`StallCause.OTHER`;
3. else (no input waiting at ``t0``) nothing is charged: an idle task is not unavailable,
   and input that arrived after ``t0`` arrived at an unknown moment.

Consequences:

- a task seen for the first time (or again after :meth:`~AvailabilityTracker.forget`, or
  after missing from an observation) only starts its clock;
- an iteration that blocks (a broker call that does not answer) is charged in full at the
  next observation, however long it took: the rule looks at elapsed time, not at the
  number of iterations;
- the charge is conservative: an interval in which the task processed anything is not
  charged at all, so a stall is under-counted by at most one interval where it ends, and
  never over-counted;
- a task missing from an observation is forgotten: samples must cover every active task,
  and the time a task was not reported is not guessed at.

Thread-safety: one thread (the processing loop) calls every method. ``/tasks`` reads the
totals through the status snapshot the loop publishes, never through this object.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from worker.clock import Clock
from worker.observability import Metrics


class StallCause(enum.Enum):
    """Why an active task with input waiting processes nothing; the ``cause`` label."""

    REBALANCE = "rebalance"  # the group is rebalancing and the task waits on it
    RESTORE = "restore"  # the task restores its stores before processing
    REVIVE = "revive"  # the task was closed dirty and is being revived
    BROKER = "broker"  # the broker does not answer (fetch, commit, produce)
    BACKPRESSURE = "backpressure"  # fetching paused: the write buffers are full
    # A task reading several partitions holds its records back for an empty one, to
    # process them in timestamp order (max.task.idle.ms; worker.tasks.partition_group).
    TASK_IDLE = "task_idle"
    OTHER = "other"  # input waiting, nothing processed, and no known reason


@dataclass(frozen=True, slots=True)
class TaskSample:
    """One active task as the loop sees it at one iteration.

    ``processed``: cumulative records this task object processed; a decrease means the
    object was recreated and counts as progress. ``input_waiting``: records are available
    beyond what the task has consumed. ``cause``: why it cannot process now, None when
    nothing stops it.
    """

    task_id: str
    processed: int
    input_waiting: bool
    cause: StallCause | None


@dataclass(frozen=True, slots=True)
class _Seen:
    at: float
    sample: TaskSample


class AvailabilityTracker:
    """Charges stalled seconds to tasks and causes by the rule of the module doc.

    Totals live as long as the counter series do (forgetting a task keeps both), so
    ``/tasks`` and Grafana always show the same numbers.
    """

    def __init__(self, metrics: Metrics, clock: Clock, interval: float = 0.25) -> None:
        self._counter = metrics.task_unavailable_seconds
        self._clock = clock
        self._interval = interval
        self._last_observation: float | None = None
        self._seen: dict[str, _Seen] = {}
        self._totals: dict[str, dict[str, float]] = {}

    def observe(self, samples: Iterable[TaskSample]) -> None:
        """Record one iteration's samples; an observation at most every ``interval``.

        Between observations ``samples`` is not iterated, so the loop may pass a generator
        and pay for building samples only when they are used.
        """
        now = self._clock.monotonic()
        if self._last_observation is not None and now - self._last_observation < self._interval:
            return
        self._last_observation = now
        seen: dict[str, _Seen] = {}
        for sample in samples:
            before = self._seen.get(sample.task_id)
            if before is not None:
                self._charge(before, sample, now)
            seen[sample.task_id] = _Seen(now, sample)
        self._seen = seen

    def unavailable_seconds(self, task_id: str) -> Mapping[str, float]:
        """Cause -> seconds charged to ``task_id`` on this instance; empty if never stalled."""
        return MappingProxyType(dict(sorted(self._totals.get(task_id, {}).items())))

    def forget(self, task_id: str) -> None:
        """The task is no longer active here: its next sample starts a new clock.

        Its totals and counter series stay (counters only grow). Idempotent.
        """
        self._seen.pop(task_id, None)

    def _charge(self, before: _Seen, sample: TaskSample, now: float) -> None:
        previous = before.sample
        if sample.processed != previous.processed or not previous.input_waiting:
            return
        seconds = now - before.at
        if seconds <= 0:
            return
        cause = (previous.cause or sample.cause or StallCause.OTHER).value
        self._counter.labels(task=sample.task_id, cause=cause).inc(seconds)
        totals = self._totals.setdefault(sample.task_id, {})
        totals[cause] = totals.get(cause, 0.0) + seconds
