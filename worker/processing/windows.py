"""Window definitions: which windows a timestamp falls in, and when a window closes.

Pure values and arithmetic, no state: the windowed store (``worker/state/window_format.py``)
and the windowed aggregation operators build on them. Times are ``int`` milliseconds since
the epoch, >= 0 (``worker/processing/timestamps.py``).

Four kinds, as in Kafka Streams [KS ``kstream/TimeWindows``, ``SlidingWindows``,
``SessionWindows``]:

- **tumbling** and **hopping** (:class:`TimeWindows`): ``[start, end)``, ``end = start +
  size``, starts at the multiples of ``advance`` counted from the epoch (never from the
  start time of a task, so restarts cannot move them; bytewax PR #217). Tumbling is
  ``advance == size``. Windows with a negative start do not exist, as in Kafka Streams.
- **sliding** (:class:`SlidingWindows`): windows of ``time_difference`` defined by the
  records themselves, inclusive at both ends: two records fall in one window iff their
  times differ by at most ``time_difference``.
- **session** (:class:`SessionWindows`): ``[first, last]`` record of a key, inclusive at
  both ends, extended (and merged) by any record within ``gap`` of it (:mod:`.sessions`).

Grace is required, with no default (KIP-633: Kafka's old 24 h default made emit-final
"appear to do nothing" for a day). A window accepts records until stream time has passed
its **last instant** by more than grace, so a record is accepted iff it is at most
``grace_ms`` late for it:

- fixed ``[start, end)``: last instant ``end - 1``, closed once ``t >= end + grace``;
- sliding ``[start, end]``: last instant ``end``, closed once ``t > end + grace``;
- session ``[start, end]``: a record up to ``gap`` after ``end`` still extends it, so
  closed once ``t > end + gap + grace`` (KAFKA-8289, KAFKA-12718 were off by one here).

``t`` is the operator's observed time: the largest timestamp it has applied, the current
record's included, and raised to the task's stream time when its emit-final punctuator
runs. Accepting records and emitting final results must use that same persisted time: a
window emitted on one clock and still open on another would change after its final
result.

Retention defaults to the shortest that is safe (``size + grace``,
``2 * time_difference + grace + 1`` for sliding, ``2 * gap + grace`` for sessions) and may not be
shorter: a window must stay in the store until it can no longer change.

Mistakes in a definition raise :class:`InvalidWindow` when the topology is built, naming
the parameter to fix (``advance_ms``, ``grace_ms``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.clock import MAX_TIME_MS
from worker.errors import TopologyError


class InvalidWindow(TopologyError):
    """A window definition is malformed: fix the parameter ``key`` names. Raised while the
    topology is built, so the worker exits 2 before it starts (as for any topology error)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"window {key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """One window's bounds, ordered by start, then end. The kind decides whether ``end_ms``
    is included: fixed windows are ``[start, end)``, sliding and session windows
    ``[start, end]``."""

    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a record goes: ``open`` windows to update (by start), and ``closed``, how many
    of the windows containing it had already closed. A record is *late*, dropped and
    counted, when it has no open window."""

    open: tuple[Window, ...]
    closed: int

    @property
    def late(self) -> bool:
        return not self.open


def _check_ms(key: str, value: object, minimum: int) -> int:
    if type(value) is not int:
        raise InvalidWindow(key, f"must be an int of milliseconds, got {value!r}")
    if value < minimum:
        raise InvalidWindow(key, f"must be >= {minimum}, got {value}")
    if value > MAX_TIME_MS:
        raise InvalidWindow(key, f"must be <= {MAX_TIME_MS}, got {value}")
    return value


def _check_retention(retention_ms: object, minimum: int, what: str) -> int:
    retention = _check_ms("retention_ms", retention_ms, 1)
    if retention < minimum:
        raise InvalidWindow(
            "retention_ms",
            f"{retention} is shorter than {what} ({minimum}): a window would "
            "leave the store while it can still change",
        )
    return retention


@dataclass(frozen=True, slots=True)
class TimeWindows:
    """Tumbling (``advance == size``) or hopping (``advance < size``) windows ``[start,
    end)``, aligned on the epoch. Build with :func:`tumbling` or :func:`hopping`.

    Raises:
        InvalidWindow: a size or advance below 1 ms, an advance over the size, a negative
            grace, or a retention shorter than ``size + grace``.
    """

    size_ms: int
    advance_ms: int
    grace_ms: int
    retention_ms: int

    def __post_init__(self) -> None:
        _check_ms("size_ms", self.size_ms, 1)
        _check_ms("advance_ms", self.advance_ms, 1)
        if self.advance_ms > self.size_ms:
            raise InvalidWindow(
                "advance_ms",
                f"{self.advance_ms} is larger than size_ms {self.size_ms}: "
                "records between windows would belong to none",
            )
        _check_ms("grace_ms", self.grace_ms, 0)
        _check_retention(self.retention_ms, self.size_ms + self.grace_ms, "size_ms + grace_ms")

    @property
    def kind(self) -> str:
        return "tumbling" if self.advance_ms == self.size_ms else "hopping"

    def window_starts(self, ts: int) -> range:
        """The starts of the windows containing ``ts``, ascending (Kafka's ``windowsFor``):
        the multiples of ``advance`` in ``(ts - size, ts]``, negative ones left out."""
        first = max(0, ts - self.size_ms + self.advance_ms) // self.advance_ms * self.advance_ms
        return range(first, ts + 1, self.advance_ms)

    def windows_for(self, ts: int) -> tuple[Window, ...]:
        """The windows containing ``ts``, by start."""
        return tuple(Window(s, s + self.size_ms) for s in self.window_starts(ts))

    def window_at(self, start_ms: int) -> Window:
        """The window starting at ``start_ms`` (a multiple of the advance)."""
        return Window(start_ms, start_ms + self.size_ms)

    def close_time(self, window: Window) -> int:
        """The last observed time at which ``window`` still accepts records."""
        return window.end_ms - 1 + self.grace_ms

    def is_closed(self, window: Window, observed_ms: int) -> bool:
        return observed_ms > self.close_time(window)

    def close_bound(self, observed_ms: int) -> int:
        """Every window with a start below this is closed at ``observed_ms`` (an exclusive
        bound on starts; emit-final emits the starts below it not emitted yet)."""
        return observed_ms - self.size_ms - self.grace_ms + 1

    def assign(self, ts: int, observed_ms: int) -> Assignment:
        """Where a record at ``ts`` goes when the operator's observed time (this record
        included) is ``observed_ms``."""
        bound = self.close_bound(observed_ms)
        starts = self.window_starts(ts)
        open_ = tuple(Window(s, s + self.size_ms) for s in starts if s >= bound)
        return Assignment(open_, len(starts) - len(open_))

    def emit_schedule(self) -> tuple[int, int]:
        """``(interval_ms, phase_ms)`` of the stream-time punctuator of emit-final: windows
        close at ``k * advance + size + grace``, so fire on exactly those instants."""
        return self.advance_ms, (self.size_ms + self.grace_ms) % self.advance_ms


def tumbling(size_ms: int, *, grace_ms: int, retention_ms: int | None = None) -> TimeWindows:
    """Back-to-back windows ``[k * size, (k + 1) * size)``; each record is in one."""
    return hopping(size_ms, size_ms, grace_ms=grace_ms, retention_ms=retention_ms)


def hopping(
    size_ms: int, advance_ms: int, *, grace_ms: int, retention_ms: int | None = None
) -> TimeWindows:
    """Windows of ``size_ms`` starting every ``advance_ms``; a record is in up to
    ``size / advance`` of them. Retention defaults to ``size + grace``."""
    if retention_ms is None:
        retention_ms = _check_ms("size_ms", size_ms, 1) + _check_ms("grace_ms", grace_ms, 0)
    return TimeWindows(size_ms, advance_ms, grace_ms, retention_ms)


@dataclass(frozen=True, slots=True)
class SlidingWindows:
    """Windows of ``time_difference_ms`` defined by the records, inclusive at both ends
    (Kafka's KIP-450). Each record ``ts`` has a *left* window ``[ts - d, ts]``, ending at
    it, and a *right* window ``[ts + 1, ts + 1 + d]``, starting just after it, which
    exists once a later record falls in it (:mod:`.sliding` plans the writes).

    Retention is judged by a window's end. A record is accepted while its right window is
    open, up to ``d + 1 + grace`` behind stream time, and its plan reads the key's windows
    ending down to ``ts - d``, hence the minimum ``2 * time_difference + grace + 1``
    (Kafka's is ``2 * time_difference + grace``, judged by start).

    Raises:
        InvalidWindow: a time difference below 1 ms, a negative grace, or a retention
            shorter than ``2 * time_difference + grace + 1``.
    """

    time_difference_ms: int
    grace_ms: int
    retention_ms: int

    def __post_init__(self) -> None:
        _check_ms("time_difference_ms", self.time_difference_ms, 1)
        _check_ms("grace_ms", self.grace_ms, 0)
        _check_retention(
            self.retention_ms,
            2 * self.time_difference_ms + self.grace_ms + 1,
            "2 * time_difference_ms + grace_ms + 1",
        )

    kind = "sliding"

    def left_window(self, ts: int) -> Window:
        """The window ending at ``ts``; for an early record (``ts < d``) Kafka's
        ``[0, d]``, since no window starts before the epoch."""
        if ts < self.time_difference_ms:
            return Window(0, self.time_difference_ms)
        return Window(ts - self.time_difference_ms, ts)

    def right_window(self, ts: int) -> Window:
        """The window starting just after ``ts``."""
        return Window(ts + 1, ts + 1 + self.time_difference_ms)

    @staticmethod
    def contains(window: Window, ts: int) -> bool:
        return window.start_ms <= ts <= window.end_ms

    def close_time(self, window: Window) -> int:
        return window.end_ms + self.grace_ms

    def is_closed(self, window: Window, observed_ms: int) -> bool:
        return observed_ms > self.close_time(window)

    def close_bound(self, observed_ms: int) -> int:
        """Every window with an end below this is closed (exclusive bound on ends)."""
        return observed_ms - self.grace_ms

    def is_late(self, ts: int, observed_ms: int) -> bool:
        """A record is late when even its right window is closed: no window it could
        update or create is open (Kafka's test)."""
        return self.is_closed(self.right_window(ts), observed_ms)


def sliding(
    time_difference_ms: int, *, grace_ms: int, retention_ms: int | None = None
) -> SlidingWindows:
    """Sliding windows; retention defaults to ``2 * time_difference + grace + 1``."""
    if retention_ms is None:
        difference = _check_ms("time_difference_ms", time_difference_ms, 1)
        retention_ms = 2 * difference + _check_ms("grace_ms", grace_ms, 0) + 1
    return SlidingWindows(time_difference_ms, grace_ms, retention_ms)


@dataclass(frozen=True, slots=True)
class SessionWindows:
    """Per-key sessions ``[first record, last record]``: a record at most ``gap_ms`` from a
    session joins it, merging the sessions it bridges (:func:`worker.processing.sessions.merge`).

    Raises:
        InvalidWindow: a gap below 1 ms, a negative grace, or a retention shorter than
            ``2 * gap + grace``.

    Retention is judged by a session's end. The minimum is ``2 * gap + grace``, not
    ``gap + grace`` (Kafka's): a record may be up to ``gap + grace`` behind stream time and
    still reach back ``gap`` further, to a session that must still be in the store so
    that the record is seen to reach a closed session and dropped, rather than start a
    second session within ``gap`` of the first.
    """

    gap_ms: int
    grace_ms: int
    retention_ms: int

    def __post_init__(self) -> None:
        _check_ms("gap_ms", self.gap_ms, 1)
        _check_ms("grace_ms", self.grace_ms, 0)
        _check_retention(
            self.retention_ms, 2 * self.gap_ms + self.grace_ms, "2 * gap_ms + grace_ms"
        )

    kind = "session"

    def close_time(self, session: Window) -> int:
        return session.end_ms + self.gap_ms + self.grace_ms

    def is_closed(self, session: Window, observed_ms: int) -> bool:
        return observed_ms > self.close_time(session)

    def close_bound(self, observed_ms: int) -> int:
        """Every session with an end below this is closed (exclusive bound on ends)."""
        return observed_ms - self.gap_ms - self.grace_ms

    def is_late(self, ts: int, observed_ms: int) -> bool:
        """A record is late when the session it would make (or extend to it) is closed."""
        return self.is_closed(Window(ts, ts), observed_ms)

    def search_bounds(self, ts: int) -> tuple[int, int]:
        """``(earliest_end, latest_start)``: the sessions a record at ``ts`` may join end
        at or after the first and start at or before the second (Kafka's findSessions)."""
        return ts - self.gap_ms, ts + self.gap_ms


def session(gap_ms: int, *, grace_ms: int, retention_ms: int | None = None) -> SessionWindows:
    """Session windows; retention defaults to ``2 * gap + grace``."""
    if retention_ms is None:
        retention_ms = 2 * _check_ms("gap_ms", gap_ms, 1) + _check_ms("grace_ms", grace_ms, 0)
    return SessionWindows(gap_ms, grace_ms, retention_ms)


Windows = TimeWindows | SlidingWindows | SessionWindows
