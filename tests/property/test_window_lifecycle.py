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

from tests.property.test_window_assignment import fixed_windows, reference_sessions
from worker.processing import sessions
from worker.processing.windows import SessionWindows, TimeWindows, Window, hopping, session
from worker.state import window_format as wf

keys = st.sampled_from([b"a", b"a\x00", b"", b"\xff"])
records = st.lists(st.tuples(keys, st.integers(min_value=0, max_value=150)), max_size=40)
FAR = 10**6


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
            assert self.identity(stored) in self.emitted, "expired before emitted"
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


class SessionModel(ExpiringModel):
    segmented = True

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

    def identity(self, stored: bytes) -> tuple[object, ...]:
        return wf.decode_segmented_key(stored)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=1, max_value=90),
    records,
    st.integers(min_value=1, max_value=4),
)
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
