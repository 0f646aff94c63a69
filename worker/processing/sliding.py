"""Sliding-window aggregation: what one record does to its key's windows, as a pure plan.

The windows of a key (Kafka Streams' KIP-450 semantics, ``d`` the time difference): for
every record time ``r``, its *left* window ``[r - d, r]`` (``[0, d]`` for an early record,
``r < d``, since no window starts before the epoch), and its *right* window
``[r + 1, r + 1 + d]`` when some record lies in it. Windows are told apart by their bounds
(a right window can be another record's left window), and each holds the aggregate of
the records inside it, with their largest time (``max_ts``, stored in front of the value).

Aggregates are opaque, so a new window's aggregate is taken from an existing window that
holds exactly the same records. :func:`plan` finds it the way Kafka Streams'
``KStreamSlidingWindowAggregate`` does, from the key's windows starting in
``[ts - 2d, ts + 1]`` (by end: ``[ts - d, ts + 1 + d]``, ``window_format.segment_ranges``):

1. every window containing ``ts`` gets the record;
2. the previous record ``p`` (the largest record time below ``ts``, the ``max_ts`` of the
   windows before ``ts``) gets its right window if it has none and ``ts`` falls in it: it
   holds ``ts`` alone;
3. ``ts`` gets its left window if missing: the records of ``[ts - d, ts)`` are exactly those
   of the window with the largest start among the windows ending before ``ts`` (empty
   when ``p < ts - d``), plus the record;
4. ``ts`` gets its right window if missing and a later record lies within ``d + 1`` of it:
   its records are those of the window with the largest start among those containing
   ``ts`` (before the record is added), without the record.

Early records (``ts < d``) share the window ``[0, d]``; steps 2 and 4 apply to them with
that window standing in for both kinds. The property test checks every plan against the
windows recomputed from all the records, in any arrival order.

Closed windows. A record is dropped as late only when its right window is closed; an
accepted record may still be late for some of its windows. Its writes to those are still
applied, because later plans build new windows from them (a window created later holds
every record in its range that arrived while it was open), but they are never forwarded,
and with ``emit="final"`` they must not reach a final result: when
:func:`touches_unemitted_closed` says so, run the emit-final step *before* applying the
plan. Each final result is then the window's records that arrived while it was open,
whatever the batches were, so a replay emits the same results.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from worker.processing.windows import SlidingWindows, Window


@dataclass(frozen=True, slots=True)
class Stored:
    """One of the key's windows as the store holds it: bounds and largest record time."""

    window: Window
    max_ts: int


@dataclass(frozen=True, slots=True)
class SlidingWrite:
    """Put ``window``: start from ``base``'s aggregate (None: the initializer), then apply
    the aggregator with the record if ``add_record``. ``max_ts`` is the window's new
    largest record time, stored with it and the timestamp of its output."""

    window: Window
    base: Window | None
    add_record: bool
    max_ts: int


def plan(ts: int, found: Iterable[Stored], time_difference_ms: int) -> tuple[SlidingWrite, ...]:
    """The writes a record at ``ts`` makes, given the key's windows ``found`` (those
    starting in ``[ts - 2d, ts + 1]`` at least; others are ignored). Ordered by window."""
    d = time_difference_ms
    if ts < d:
        return _plan_early(ts, found, d)
    before: Stored | None = None  # largest start among windows ending before ts
    containing: Stored | None = None  # largest start among windows containing ts
    previous: int | None = None  # the largest record time below ts
    starts: set[int] = set()
    writes: dict[Window, SlidingWrite] = {}
    for stored in sorted(_relevant(found, ts, d), key=lambda s: s.window):
        window = stored.window
        starts.add(window.start_ms)
        if window.end_ms < ts:
            before, previous = stored, stored.max_ts
        elif window.start_ms <= ts:
            containing = stored
            writes[window] = _add(stored, ts)
            if window.end_ms == ts and stored.max_ts < ts:  # the left window exists
                previous = stored.max_ts
    _previous_right(writes, starts, previous, ts, d)
    left = Window(ts - d, ts)
    if left not in writes:
        # here previous is before's max_ts; below ts - d the left window holds ts alone
        nonempty = before is not None and previous is not None and previous >= ts - d
        base = before.window if nonempty and before is not None else None
        writes[left] = SlidingWrite(left, base, True, ts)
    _own_right(writes, starts, containing, ts, d)
    return tuple(writes[w] for w in sorted(writes))


def _relevant(found: Iterable[Stored], ts: int, d: int) -> list[Stored]:
    return [s for s in found if max(0, ts - 2 * d) <= s.window.start_ms <= ts + 1]


def _add(stored: Stored, ts: int) -> SlidingWrite:
    return SlidingWrite(stored.window, stored.window, True, max(stored.max_ts, ts))


def _previous_right(
    writes: dict[Window, SlidingWrite], starts: set[int], previous: int | None, ts: int, d: int
) -> None:
    """Step 2: the previous record's right window, holding ``ts`` alone."""
    if previous is None or previous + 1 in starts or previous + 1 + d < ts:
        return
    window = Window(previous + 1, previous + 1 + d)
    writes.setdefault(window, SlidingWrite(window, None, True, ts))


def _own_right(
    writes: dict[Window, SlidingWrite],
    starts: set[int],
    containing: Stored | None,
    ts: int,
    d: int,
) -> None:
    """Step 4: the record's right window, from the later records' window."""
    if ts + 1 in starts or containing is None or containing.max_ts <= ts:
        return
    window = Window(ts + 1, ts + 1 + d)
    writes.setdefault(window, SlidingWrite(window, containing.window, False, containing.max_ts))


def _plan_early(ts: int, found: Iterable[Stored], d: int) -> tuple[SlidingWrite, ...]:
    """Records before ``d`` share ``[0, d]`` (Kafka's ``processEarly``)."""
    combined_window = Window(0, d)
    combined: Stored | None = None
    containing: Stored | None = None
    previous: int | None = None
    starts: set[int] = set()
    writes: dict[Window, SlidingWrite] = {}
    for stored in sorted((s for s in found if s.window.start_ms <= ts + 1), key=lambda s: s.window):
        window = stored.window
        starts.add(window.start_ms)
        if window == combined_window:
            combined = stored
            if stored.max_ts < ts:
                previous = stored.max_ts
        elif window.start_ms <= ts:
            containing = stored
            writes[window] = _add(stored, ts)
    if containing is None and combined is not None and combined.max_ts > ts:
        containing = combined  # it holds only records after ts (Kafka's argument)
    _own_right(writes, starts, containing, ts, d)
    _previous_right(writes, starts, previous, ts, d)
    if combined is None:
        writes[combined_window] = SlidingWrite(combined_window, None, True, ts)
    else:
        writes[combined_window] = _add(combined, ts)
    return tuple(writes[w] for w in sorted(writes))


def touches_unemitted_closed(
    writes: Iterable[SlidingWrite],
    windows: SlidingWindows,
    observed_ms: int,
    last_emitted_close: int,
) -> bool:
    """True when a plan writes to a window that has closed but whose final result is not
    out yet (its end at or above the emit-final marker): emit first, then apply."""
    return any(
        windows.is_closed(w.window, observed_ms) and w.window.end_ms >= last_emitted_close
        for w in writes
    )
