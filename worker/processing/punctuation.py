"""A task's punctuation schedules: callbacks on stream time and on the wall clock.

Kafka Streams' semantics [KS ``p/i/PunctuationQueue``, ``PunctuationSchedule``], with one
deliberate difference for stream time (see "Restarts" below):

- ``stream``: boundaries are ``k * interval_ms + phase_ms`` (aligned on the epoch, never
  on the start time). A check at stream time ``t`` fires a schedule once if at least one
  boundary lies in ``(t_last, t]``, ``t_last`` being the stream time of the previous check
  (or of registration); boundaries passed together fire once, and the callback gets ``t``,
  the current stream time, never the boundary.
- ``wall``: runs on the injected clock's *monotonic* time, so a wall-clock step never
  fires or starves a schedule. The first fire is one interval after registration; the
  grid is ``start + k * interval``; fires missed (a long batch) are skipped. The callback
  gets the wall-clock time in epoch ms (``clock.wall()``), as Kafka Streams passes it.

Restarts. Kafka Streams starts every stream-time schedule at 0, so after a restart or a
move the first check fires at once. Here a schedule starts at the stream time the task
has when it registers (the restored, committed one): a boundary at or before it was
crossed by a check that committed together with that stream time, so its punctuation is
already in the committed output. A crash before the commit rolls both back, and
reprocessing crosses the boundary again: once per boundary under exactly-once.

Cost. The queue is a heap on the next due time per kind; a check when nothing is due is
one comparison per kind. Cancelled schedules are dropped when they reach the top, and the
heap is rebuilt when they become the majority.

Thread-safety: none; the task's thread owns its queue.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from worker.clock import Clock
from worker.errors import WorkerError

UNKNOWN_TIME = -1  # stream time before any record (Kafka Streams' RecordQueue.UNKNOWN)

Punctuator = Callable[[int], object]  # called with the current time in ms


class PunctuationKind(enum.Enum):
    STREAM = "stream"
    WALL = "wall"


class PunctuatorFailed(WorkerError):
    """A punctuator raised. The task handles it like a processing error (its policy; under
    exactly-once, abort and revive the task): the cause is chained, the schedule named."""

    def __init__(self, name: str, kind: PunctuationKind, now_ms: int) -> None:
        super().__init__(f"punctuator {name!r} ({kind.value}) failed at {now_ms}")
        self.name = name
        self.kind = kind
        self.now_ms = now_ms


@dataclass(eq=False, slots=True)
class Schedule:
    """One registered punctuator; returned by :meth:`Punctuations.schedule` to cancel it."""

    name: str
    kind: PunctuationKind
    interval_ms: int
    phase_ms: int
    callback: Punctuator
    next_due_ms: int
    cancelled: bool = field(default=False)
    _queue: Punctuations | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop firing. Idempotent; safe from inside any punctuator, this one included."""
        if not self.cancelled:
            self.cancelled = True
            if self._queue is not None:
                self._queue._cancelled(self)


def next_boundary(after_ms: int, interval_ms: int, phase_ms: int = 0) -> int:
    """The smallest ``k * interval_ms + phase_ms`` strictly greater than ``after_ms``."""
    return phase_ms + ((after_ms - phase_ms) // interval_ms + 1) * interval_ms


_Entry = tuple[int, int, Schedule]  # (next due ms, registration order, schedule)


class Punctuations:
    """The punctuation schedules of one task (both kinds), checked once per batch.

    Lifecycle: created when the task becomes RUNNING with its restored stream time;
    processors register in ``init``; :meth:`clear` when the task is suspended, revoked or
    closed (no final punctuation, as in Kafka Streams).
    """

    def __init__(self, clock: Clock, stream_time_ms: int = UNKNOWN_TIME) -> None:
        self._clock = clock
        self._stream_time = stream_time_ms
        self._heaps: dict[PunctuationKind, list[_Entry]] = {
            PunctuationKind.STREAM: [],
            PunctuationKind.WALL: [],
        }
        self._order = itertools.count()
        self._cancelled_count = 0

    @property
    def stream_time_ms(self) -> int:
        """The stream time of the last check (or of creation)."""
        return self._stream_time

    def __len__(self) -> int:
        """Live (not cancelled) schedules."""
        return sum(len(heap) for heap in self._heaps.values()) - self._cancelled_count

    def schedule(
        self,
        interval_ms: int,
        kind: PunctuationKind | str,
        callback: Punctuator,
        *,
        phase_ms: int = 0,
        name: str = "",
    ) -> Schedule:
        """Register ``callback`` to run every ``interval_ms`` of ``kind`` time.

        ``phase_ms`` (stream kind only, ``0 <= phase_ms < interval_ms``) shifts the
        boundaries off the epoch multiples. ``name`` appears in errors and metrics.

        Raises:
            ValueError: an interval below 1 ms, a phase out of range or on a wall
                schedule, or an unknown kind.
        """
        kind = PunctuationKind(kind)
        if type(interval_ms) is not int or interval_ms < 1:
            raise ValueError(f"punctuation interval must be an int >= 1 ms, got {interval_ms!r}")
        if type(phase_ms) is not int or not 0 <= phase_ms < interval_ms:
            raise ValueError(f"phase_ms must be an int in [0, {interval_ms}), got {phase_ms!r}")
        if kind is PunctuationKind.WALL:
            if phase_ms:
                raise ValueError("phase_ms applies to stream-time punctuators only")
            due = self._monotonic_ms() + interval_ms
        else:
            due = next_boundary(self._stream_time, interval_ms, phase_ms)
        schedule = Schedule(name, kind, interval_ms, phase_ms, callback, due, _queue=self)
        heapq.heappush(self._heaps[kind], (due, next(self._order), schedule))
        return schedule

    def punctuate(self, stream_time_ms: int) -> int:
        """Check both kinds (stream first, as Kafka Streams does); the number fired."""
        return self.punctuate_stream(stream_time_ms) + self.punctuate_wall()

    def punctuate_stream(self, stream_time_ms: int) -> int:
        """Fire the stream schedules with a boundary in (last check, ``stream_time_ms``].

        A stream time below the last one checked is ignored (stream time never goes back).

        Raises:
            PunctuatorFailed: a callback raised (the first one, once every due schedule ran).
        """
        if stream_time_ms <= self._stream_time:
            return 0
        self._stream_time = stream_time_ms
        return self._fire(PunctuationKind.STREAM, stream_time_ms, stream_time_ms)

    def punctuate_wall(self) -> int:
        """Fire the wall schedules due on the monotonic clock.

        Raises:
            PunctuatorFailed: a callback raised (the first one, once every due schedule ran).
        """
        heap = self._heaps[PunctuationKind.WALL]
        if not heap:
            return 0
        now = self._monotonic_ms()
        if heap[0][0] > now:
            return 0
        return self._fire(PunctuationKind.WALL, now, int(self._clock.wall() * 1000))

    def clear(self) -> None:
        """Drop every schedule (task suspended, revoked or closed). Idempotent."""
        for heap in self._heaps.values():
            for _, _, schedule in heap:
                schedule.cancelled = True
                schedule._queue = None
            heap.clear()
        self._cancelled_count = 0

    def _fire(self, kind: PunctuationKind, now: int, passed: int) -> int:
        """Pop every schedule due at ``now``, reschedule it past ``now``, then call it with
        ``passed``. Rescheduling first: a schedule fires at most once per check, also when
        its callback registers or cancels schedules, and a failed one is not retried in a
        loop. One failing callback does not keep the others of the check from running;
        the first failure is raised once they have."""
        heap = self._heaps[kind]
        due: list[Schedule] = []
        while heap and heap[0][0] <= now:
            _, _, schedule = heapq.heappop(heap)
            if schedule.cancelled:
                self._cancelled_count -= 1
                continue
            schedule.next_due_ms = _next_due(schedule, now)
            heapq.heappush(heap, (schedule.next_due_ms, next(self._order), schedule))
            due.append(schedule)
        fired = 0
        failed: tuple[Schedule, Exception] | None = None
        for schedule in due:
            if schedule.cancelled:  # cancelled by an earlier callback of this check
                continue
            try:
                schedule.callback(passed)
            except Exception as exc:
                failed = failed or (schedule, exc)
                continue
            fired += 1
        if failed is not None:
            raise PunctuatorFailed(failed[0].name, kind, passed) from failed[1]
        return fired

    def _cancelled(self, schedule: Schedule) -> None:
        self._cancelled_count += 1
        if self._cancelled_count * 2 > sum(len(heap) for heap in self._heaps.values()):
            for kind, heap in self._heaps.items():
                self._heaps[kind] = [entry for entry in heap if not entry[2].cancelled]
                heapq.heapify(self._heaps[kind])
            self._cancelled_count = 0

    def _monotonic_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)


def _next_due(schedule: Schedule, now: int) -> int:
    """The first point of the schedule's grid after ``now``: missed points are skipped."""
    if schedule.kind is PunctuationKind.STREAM:
        return next_boundary(now, schedule.interval_ms, schedule.phase_ms)
    start = schedule.next_due_ms
    return start + ((now - start) // schedule.interval_ms + 1) * schedule.interval_ms
