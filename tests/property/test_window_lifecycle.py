"""Windows through their whole life in a model store: records, emit-final steps, expiry.

The pieces together (assignment, close bounds, the layout's emit ranges, the expiry
cutoff and its delete ranges), checked for what the issue promises: each window is
emitted once, only after it closed, never changed after, never expired before it was
emitted, and in the end every accepted record is in exactly one emitted result.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.property.test_sliding_plan import reference
from tests.property.test_window_assignment import fixed_windows, reference_sessions
from worker.processing import sessions
from worker.processing import sliding as sliding_plan
from worker.processing.sliding import Stored
from worker.processing.windows import (
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    hopping,
    session,
    sliding,
)
from worker.state import window_format as wf

keys = st.sampled_from([b"a", b"a\x00", b"", b"\xff"])
records = st.lists(st.tuples(keys, st.integers(min_value=0, max_value=150)), max_size=40)
FAR = 10**6


def segmented_runs(span_max: int) -> tuple[st.SearchStrategy[Any], ...]:
    """(gap or time difference, grace, retention beyond the minimum, segment interval,
    records, emit every n records)."""
    return (
        st.integers(min_value=1, max_value=span_max),
        st.integers(min_value=0, max_value=span_max),
        st.integers(min_value=0, max_value=span_max),
        st.integers(min_value=1, max_value=90),
        records,
        st.integers(min_value=1, max_value=4),
    )


class ExpiringModel:
    """What both models share: expiry by the layout's cutoff and delete ranges, checking
    that it takes only emitted windows."""

    windows: TimeWindows | SessionWindows
    store: dict[bytes, Any]
    emitted: dict[Any, Any]
    observed: int
    last_emitted: int
    expired_upto: int
    interval: int
    segmented: bool
    born_closed: frozenset[Any] | set[Any] = frozenset()  # windows never emittable

    def identity(self, stored: bytes) -> tuple[object, ...]:
        raise NotImplementedError

    def record(self, key: bytes, ts: int) -> None:
        raise NotImplementedError

    def emit(self) -> None:
        raise NotImplementedError

    def run(self, stream: list[tuple[bytes, int]], every: int) -> None:
        """Apply the records, emitting every ``every`` of them and expiring after each
        (also between emits: expiry must wait for them), then close everything."""
        for index, (key, ts) in enumerate(stream):
            self.record(key, ts)
            if index % every == 0:
                self.emit()
            self.expire()
        self.observed = FAR
        self.emit()

    def expire(self) -> None:
        retention = self.windows.retention_ms
        cutoff = wf.expiry_cutoff(self.observed, retention, self.last_emitted)
        plan = wf.plan_expiry(cutoff, self.expired_upto, self.interval, segmented=self.segmented)
        if plan is None:
            return
        for stored in [k for k in self.store if k in plan.range]:
            identity = self.identity(stored)
            assert identity in self.emitted or identity in self.born_closed, "expired unemitted"
            del self.store[stored]
        self.expired_upto = plan.expired_upto


class FixedModel(ExpiringModel):
    segmented = False

    def __init__(self, spec: tuple[int, int, int], extra: int, interval: int) -> None:
        size, advance, grace = spec
        self.windows = hopping(size, advance, grace_ms=grace, retention_ms=size + grace + extra)
        self.interval = interval
        self.store: dict[bytes, int] = {}
        self.emitted: dict[tuple[int, bytes], int] = {}
        self.accepted: Counter[tuple[int, bytes]] = Counter()
        self.observed = -1
        self.last_emitted = 0
        self.expired_upto = 0

    def record(self, key: bytes, ts: int) -> None:
        self.observed = max(self.observed, ts)
        for window in self.windows.assign(ts, self.observed).open:
            assert (window.start_ms, key) not in self.emitted, "an emitted window changed"
            assert window.start_ms >= self.expired_upto, "a record reached an expired window"
            stored = wf.fixed_key(window.start_ms, key)
            self.store[stored] = self.store.get(stored, 0) + 1
            self.accepted[window.start_ms, key] += 1

    def emit(self) -> None:
        bound = self.windows.close_bound(self.observed)
        emit_range = wf.emit_range(self.last_emitted, bound)
        if emit_range is None:
            return
        for stored in sorted(k for k in self.store if k in emit_range):
            start, key = wf.decode_fixed_key(stored)
            assert self.windows.is_closed(self.windows.window_at(start), self.observed)
            assert (start, key) not in self.emitted, "emitted twice"
            self.emitted[start, key] = self.store[stored]
        self.last_emitted = bound

    def identity(self, stored: bytes) -> tuple[object, ...]:
        return wf.decode_fixed_key(stored)


@settings(max_examples=200, deadline=None)
@given(
    fixed_windows(),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=1, max_value=90),
    records,
    st.integers(min_value=1, max_value=4),
)
def test_fixed_windows_are_emitted_once_closed_and_expired_only_after(
    spec, extra, interval, stream, every
) -> None:
    model = FixedModel(spec, extra, interval)
    model.run(stream, every)

    assert model.emitted == dict(model.accepted)


class SegmentedModel(ExpiringModel):
    """Sliding and session windows: keyed by end inside segments, emitted by end."""

    windows: SessionWindows | SlidingWindows  # type: ignore[assignment]
    segmented = True

    def identity(self, stored: bytes) -> tuple[object, ...]:
        return wf.decode_segmented_key(stored)

    def emit(self) -> None:
        bound = self.windows.close_bound(self.observed)
        span = wf.segment_span(self.last_emitted, bound - 1, self.interval)
        if span is None or bound <= self.last_emitted:
            return
        for stored in sorted(k for k in self.store if k in span):
            key, start, end = wf.decode_segmented_key(stored)
            if self.last_emitted <= end < bound:
                assert self.windows.is_closed(Window(start, end), self.observed)
                assert (key, start, end) not in self.emitted, "emitted twice"
                self.emitted[key, start, end] = self.store[stored]
        self.last_emitted = bound


class SessionModel(SegmentedModel):
    def __init__(self, gap: int, grace: int, extra: int, interval: int) -> None:
        self.windows = session(gap, grace_ms=grace, retention_ms=2 * gap + grace + extra)
        self.interval = interval
        self.store: dict[bytes, tuple[int, ...]] = {}
        self.emitted: dict[tuple[bytes, int, int], tuple[int, ...]] = {}
        self.accepted: dict[bytes, list[int]] = {}
        self.observed = -1
        self.last_emitted = 0
        self.expired_upto = 0

    def record(self, key: bytes, ts: int) -> None:
        self.observed = max(self.observed, ts)
        earliest_end, latest_start = self.windows.search_bounds(ts)
        ranges = wf.segment_ranges(key, earliest_end, self.observed, self.interval)
        found = {}
        for stored in sorted(k for k in self.store if any(k in r for r in ranges)):
            found_key, start, end = wf.decode_segmented_key(stored)
            assert found_key == key and end >= earliest_end
            if start <= latest_start:
                found[Window(start, end)] = stored
        merged = sessions.assign(ts, found, self.windows, self.observed)
        if merged is None:
            return
        records = [ts]
        for old in merged.replaced:
            assert (key, old.start_ms, old.end_ms) not in self.emitted, "an emitted session changed"
            records.extend(self.store.pop(found[old]))
        new = merged.session
        self.store[wf.segmented_key(key, new.start_ms, new.end_ms, self.interval)] = tuple(
            sorted(records)
        )
        self.accepted.setdefault(key, []).append(ts)


@settings(max_examples=200, deadline=None)
@given(*segmented_runs(span_max=40))
# [7, 7] closes and is emitted at 25; 16 is within gap of it, so it is late. With a
# retention of only gap + grace, [7, 7] was already expired and 16 started a second
# session next to it.
@example(gap=10, grace=0, extra=0, interval=1, stream=[(b"a", 7), (b"a", 25), (b"a", 16)], every=1)
def test_sessions_are_emitted_once_closed_and_match_the_reference_of_accepted_records(
    gap, grace, extra, interval, stream, every
) -> None:
    model = SessionModel(gap, grace, extra, interval)
    model.run(stream, every)

    for key, accepted in model.accepted.items():
        emitted = sorted(Window(s, e) for k, s, e in model.emitted if k == key)
        assert emitted == reference_sessions(accepted, gap)
    assert sorted(ts for r in model.emitted.values() for ts in r) == sorted(
        ts for times in model.accepted.values() for ts in times
    )


class SlidingModel(SegmentedModel):
    def __init__(self, d: int, grace: int, extra: int, interval: int) -> None:
        self.windows = sliding(d, grace_ms=grace, retention_ms=2 * d + grace + 1 + extra)
        self.interval = interval
        self.store: dict[bytes, tuple[int, tuple[int, ...]]] = {}
        self.shadow: dict[tuple[bytes, Window], tuple[int, tuple[int, ...]]] = {}  # no expiry
        self.emitted: dict[tuple[bytes, int, int], tuple[int, tuple[int, ...]]] = {}
        self.born_closed: set[tuple[bytes, int, int]] = set()
        self.arrivals: list[tuple[bytes, int, int]] = []  # key, ts, observed time then
        self.observed = -1
        self.last_emitted = 0
        self.expired_upto = 0

    def found(self, key: bytes, ts: int) -> list[Stored]:
        d = self.windows.time_difference_ms
        ranges = wf.segment_ranges(key, ts - d, ts + 1 + d, self.interval)
        found = []
        for stored, (max_ts, _) in self.store.items():
            if any(stored in r for r in ranges):
                found_key, start, end = wf.decode_segmented_key(stored)
                assert found_key == key
                found.append(Stored(Window(start, end), max_ts))
        return found

    def record(self, key: bytes, ts: int) -> None:
        self.observed = max(self.observed, ts)
        if self.windows.is_late(ts, self.observed):
            return
        d = self.windows.time_difference_ms
        writes = sliding_plan.plan(ts, self.found(key, ts), d)
        everything = [Stored(w, v[0]) for (k, w), v in self.shadow.items() if k == key]
        assert writes == sliding_plan.plan(ts, everything, d), "a window it needs expired"
        if sliding_plan.touches_unemitted_closed(
            writes, self.windows, self.observed, self.last_emitted
        ):
            self.emit()
        self.arrivals.append((key, ts, self.observed))
        before = dict(self.store)
        for write in writes:
            window = write.window
            records: tuple[int, ...] = ()
            if write.base is not None:
                base = wf.segmented_key(key, write.base.start_ms, write.base.end_ms, self.interval)
                records = before[base][1]
            if write.add_record:
                records = tuple(sorted((*records, ts)))
            stored = wf.segmented_key(key, window.start_ms, window.end_ms, self.interval)
            if stored not in self.store and self.windows.is_closed(window, self.observed):
                self.born_closed.add((key, window.start_ms, window.end_ms))
            self.store[stored] = self.shadow[key, window] = (write.max_ts, records)


@settings(max_examples=200, deadline=None)
@given(*segmented_runs(span_max=30))
# 29 is accepted at 40 (its right window [30, 40] is open) and its left window needs
# [9, 19], whose end is 2d + grace + 1 behind: a retention of 2d + grace expired it.
@example(d=10, grace=0, extra=0, interval=1, stream=[(b"a", 19), (b"a", 40), (b"a", 29)], every=1)
def test_sliding_windows_emit_the_records_that_came_while_they_were_open(
    d, grace, extra, interval, stream, every
) -> None:
    model = SlidingModel(d, grace, extra, interval)
    model.run(stream, every)

    for (key, start, end), (max_ts, emitted) in model.emitted.items():
        arrived_open = sorted(
            ts
            for k, ts, t in model.arrivals
            if k == key and start <= ts <= end and t <= end + grace
        )
        assert list(emitted) == arrived_open and max_ts == max(emitted)
    for key in {k for k, _, _ in model.arrivals}:
        accepted = [ts for k, ts, _ in model.arrivals if k == key]
        assert {w for k, w in model.shadow if k == key} == set(reference(accepted, d))
    assert (
        set(model.emitted)
        == {(k, w.start_ms, w.end_ms) for k, w in model.shadow} - model.born_closed
    )
