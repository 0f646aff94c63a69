"""Window assignment and session merging against plain reference models."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.processing import sessions
from worker.processing.windows import Window, hopping

sizes = st.integers(min_value=1, max_value=50)
times = st.integers(min_value=0, max_value=400)


@st.composite
def fixed_windows(draw: st.DrawFn) -> tuple[int, int, int]:
    size = draw(sizes)
    advance = draw(st.integers(min_value=1, max_value=size))
    grace = draw(st.integers(min_value=0, max_value=30))
    return size, advance, grace


@given(fixed_windows(), times)
def test_every_record_is_in_exactly_the_windows_that_contain_its_timestamp(spec, ts) -> None:
    size, advance, grace = spec
    windows = hopping(size, advance, grace_ms=grace)
    # every epoch-aligned window with a start >= 0 that could hold ts, enumerated plainly
    expected = [
        Window(start, start + size)
        for start in range(0, ts + 1, advance)
        if start <= ts < start + size
    ]

    assert list(windows.windows_for(ts)) == expected
    assert len(expected) <= -(-size // advance)


@given(fixed_windows(), times, st.integers(min_value=0, max_value=500))
def test_a_record_updates_exactly_its_windows_still_open(spec, ts, ahead) -> None:
    size, advance, grace = spec
    windows = hopping(size, advance, grace_ms=grace)
    observed = ts + ahead

    assignment = windows.assign(ts, observed)

    # open: the record is at most grace late for the window's last instant (end - 1)
    expected = [w for w in windows.windows_for(ts) if observed - (w.end_ms - 1) <= grace]
    assert list(assignment.open) == expected
    assert assignment.closed + len(assignment.open) == len(windows.windows_for(ts))
    assert assignment.late == (not expected)


def reference_sessions(record_times: list[int], gap: int) -> list[Window]:
    """Sorted times, cut wherever two neighbours are more than ``gap`` apart."""
    result: list[Window] = []
    for ts in sorted(record_times):
        if result and ts - result[-1].end_ms <= gap:
            result[-1] = Window(result[-1].start_ms, ts)
        else:
            result.append(Window(ts, ts))
    return result


@given(st.lists(times, min_size=1, max_size=30), st.integers(min_value=1, max_value=40))
def test_sessions_merged_record_by_record_in_any_order_match_the_reference(
    record_times, gap
) -> None:
    live: set[Window] = set()
    for ts in record_times:
        merge = sessions.merge(ts, live, gap)
        live.difference_update(merge.replaced)
        live.add(merge.session)
        assert merge.session.start_ms <= ts <= merge.session.end_ms
        assert all(w.start_ms >= merge.session.start_ms for w in merge.replaced)
        assert all(w.end_ms <= merge.session.end_ms for w in merge.replaced)

    assert sorted(live, key=lambda w: w.start_ms) == reference_sessions(record_times, gap)
