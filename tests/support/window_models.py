"""Reference models of windowed aggregations, written from the definitions
(docs/windows.md §1, §3, §4), not from the operator: records applied in order, a window
accepts a record while the largest timestamp seen, the record's included, is at most
``grace`` past the window's last instant; a record no window accepts is late. Aggregates
are the sorted lists of the timestamps of each window's records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.processing.windows import SessionWindows, SlidingWindows, TimeWindows, Window
from worker.windowed_serde import Windowed

Record = tuple[str, int]  # key, timestamp


def fixed_model(
    windows: TimeWindows, recs: list[Record]
) -> tuple[list[tuple[Windowed[str], list[int]]], dict[Windowed[str], list[int]], int, int]:
    """(update outputs, every window's records, late count, final stream time)."""
    observed, late = -1, 0
    updates: list[tuple[Windowed[str], list[int]]] = []
    contents: dict[Windowed[str], list[int]] = {}
    for key, ts in recs:
        observed = max(observed, ts)
        accepted = False
        start = ts - ts % windows.advance_ms
        starts = []
        while start >= 0 and start + windows.size_ms > ts:
            starts.append(start)
            start -= windows.advance_ms
        for start in sorted(starts):
            end = start + windows.size_ms
            if observed <= end - 1 + windows.grace_ms:
                accepted = True
                window = Windowed(key, start, end)
                contents[window] = sorted([*contents.get(window, []), ts])
                updates.append((window, contents[window]))
        late += not accepted
    return updates, contents, late, observed


def session_model(
    windows: SessionWindows, recs: list[Record]
) -> tuple[list[tuple[Windowed[str], Any]], dict[Windowed[str], list[int]], int, int]:
    observed, late = -1, 0
    updates: list[tuple[Windowed[str], Any]] = []
    contents: dict[Windowed[str], list[int]] = {}
    gap, grace = windows.gap_ms, windows.grace_ms

    def closed(window: Windowed[str]) -> bool:
        return observed > window.end_ms + gap + grace

    for key, ts in recs:
        observed = max(observed, ts)
        reached = sorted(
            (
                w
                for w in contents
                if w.key == key and w.end_ms >= ts - gap and w.start_ms <= ts + gap
            ),
            key=lambda w: (w.start_ms, w.end_ms),
        )
        merged = Windowed(
            key,
            min([ts] + [w.start_ms for w in reached]),
            max([ts] + [w.end_ms for w in reached]),
        )
        alone = Windowed(key, ts, ts)
        if closed(alone) or closed(merged) or any(closed(w) for w in reached):
            late += 1
            continue
        times = sorted([ts] + [t for w in reached for t in contents.pop(w)])
        updates.extend((w, None) for w in reached if w != merged)
        contents[merged] = times
        updates.append((merged, times))
    return updates, contents, late, observed


def closed_windows(
    contents: dict[Windowed[str], list[int]],
    stream_time: int,
    close_time: Callable[[Windowed[str]], int],
) -> dict[Windowed[str], list[int]]:
    return {w: v for w, v in contents.items() if stream_time > close_time(w)}


def sliding_model(
    windows: SlidingWindows, recs: list[Record]
) -> tuple[dict[Windowed[str], list[int]], int, int]:
    """(every emittable window's records, late count, final stream time) of sliding windows.

    A record is late when its right window is closed at the observed time it brings.
    The windows are KIP-450's over the accepted records (a left window per record, a right
    one when a later record lies in it); one that first exists already closed (a late-ish
    record completing an old pair) is never emitted. A window's final result holds the
    accepted records in its range that arrived while it was open, whenever the window
    itself came to exist (docs/windows.md §4)."""
    observed, late = -1, 0
    accepted: dict[str, list[tuple[int, int]]] = {}  # key -> (time, observed on arrival)
    created: dict[Windowed[str], int] = {}  # window -> observed time when it first existed
    for key, ts in recs:
        observed = max(observed, ts)
        if windows.is_late(ts, observed):
            late += 1
            continue
        accepted.setdefault(key, []).append((ts, observed))
        for bounds in _sliding_windows(windows, [t for t, _ in accepted[key]]):
            created.setdefault(Windowed(key, bounds.start_ms, bounds.end_ms), observed)
    contents: dict[Windowed[str], list[int]] = {}
    for window, observed_then in created.items():
        close = windows.close_time(Window(window.start_ms, window.end_ms))
        if observed_then <= close:
            contents[window] = sorted(
                t
                for t, arrived in accepted[window.key]
                if window.start_ms <= t <= window.end_ms and arrived <= close
            )
    return contents, late, observed


def _sliding_windows(windows: SlidingWindows, times: list[int]) -> set[Window]:
    """KIP-450's windows of a key's record times."""
    d = windows.time_difference_ms
    found = {windows.left_window(r) for r in times}
    found |= {windows.right_window(r) for r in times if any(r < x <= r + 1 + d for x in times)}
    return found
