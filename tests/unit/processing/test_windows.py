"""Window definitions: validation naming the parameter, assignment, close conditions."""

from __future__ import annotations

import pytest

from worker.errors import TopologyError
from worker.processing import sessions
from worker.processing.windows import (
    InvalidWindow,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    hopping,
    session,
    sliding,
    tumbling,
)


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: hopping(60_000, 120_000, grace_ms=0), "advance_ms"),
        (lambda: hopping(60_000, 0, grace_ms=0), "advance_ms"),
        (lambda: tumbling(60_000, grace_ms=-1), "grace_ms"),
        (lambda: tumbling(0, grace_ms=0), "size_ms"),
        (lambda: tumbling(60_000, grace_ms=5_000, retention_ms=64_999), "retention_ms"),
        (lambda: tumbling(60_000, grace_ms=1.5), "grace_ms"),  # type: ignore[arg-type]
        (lambda: tumbling(True, grace_ms=0), "size_ms"),  # type: ignore[arg-type]
        (lambda: sliding(10_000, grace_ms=-5), "grace_ms"),
        (lambda: sliding(0, grace_ms=0), "time_difference_ms"),
        (lambda: sliding(10_000, grace_ms=1_000, retention_ms=21_000), "retention_ms"),
        (lambda: session(0, grace_ms=0), "gap_ms"),
        (lambda: session(30_000, grace_ms=-1), "grace_ms"),
        (lambda: session(30_000, grace_ms=1_000, retention_ms=60_999), "retention_ms"),
    ],
)
def test_a_bad_definition_is_a_topology_error_naming_the_parameter(build, key) -> None:
    with pytest.raises(InvalidWindow) as raised:
        build()

    assert raised.value.key == key
    assert key in str(raised.value)
    assert isinstance(raised.value, TopologyError)


def test_grace_has_no_default() -> None:
    with pytest.raises(TypeError):
        tumbling(60_000)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        session(60_000)  # type: ignore[call-arg]


def test_retention_defaults_to_the_shortest_safe_one() -> None:
    assert tumbling(60_000, grace_ms=5_000).retention_ms == 65_000
    assert hopping(60_000, 10_000, grace_ms=0).retention_ms == 60_000
    assert sliding(10_000, grace_ms=1_000).retention_ms == 21_001
    assert session(30_000, grace_ms=1_000).retention_ms == 61_000
    assert tumbling(60_000, grace_ms=0, retention_ms=3_600_000).retention_ms == 3_600_000


def test_kinds() -> None:
    assert tumbling(10, grace_ms=0).kind == "tumbling"
    assert hopping(10, 5, grace_ms=0).kind == "hopping"
    assert sliding(10, grace_ms=0).kind == "sliding"
    assert session(10, grace_ms=0).kind == "session"


def test_hopping_windows_are_epoch_aligned_and_skip_negative_starts() -> None:
    windows = hopping(10, 5, grace_ms=0)

    assert windows.windows_for(12) == (Window(5, 15), Window(10, 20))
    assert windows.windows_for(10) == (Window(5, 15), Window(10, 20))
    assert windows.windows_for(3) == (Window(0, 10),)
    assert tumbling(10, grace_ms=0).windows_for(19) == (Window(10, 20),)


def test_a_fixed_window_closes_once_stream_time_reaches_end_plus_grace() -> None:
    windows = tumbling(10, grace_ms=3)
    window = Window(10, 20)

    assert not windows.is_closed(window, 22)
    assert windows.is_closed(window, 23)
    assert windows.close_bound(22) == 10  # starts below 10 closed: [0, 10)
    assert windows.close_bound(23) == 11


def test_a_record_goes_to_its_open_windows_and_is_late_with_none() -> None:
    windows = hopping(10, 5, grace_ms=2)

    partly = windows.assign(12, observed_ms=17)  # [5, 15) closed at 17, [10, 20) open
    assert partly.open == (Window(10, 20),) and partly.closed == 1 and not partly.late
    dropped = windows.assign(12, observed_ms=22)
    assert dropped.open == () and dropped.closed == 2 and dropped.late
    assert windows.assign(12, observed_ms=12).open == windows.windows_for(12)


def test_emit_final_fires_on_the_close_instants() -> None:
    windows = hopping(60_000, 15_000, grace_ms=10_000)
    interval, phase = windows.emit_schedule()

    assert (interval, phase) == (15_000, 10_000)
    for start in (0, 15_000, 30_000):
        close = start + 60_000 + 10_000  # first time at which it is closed
        assert (close - phase) % interval == 0
        assert windows.close_bound(close) == start + 1


def test_a_sliding_window_is_inclusive_and_closes_after_end_plus_grace() -> None:
    windows = sliding(10, grace_ms=2)

    assert windows.left_window(25) == Window(15, 25)
    assert windows.right_window(25) == Window(26, 36)
    assert windows.left_window(4) == Window(0, 10)
    assert SlidingWindows.contains(Window(15, 25), 15) and SlidingWindows.contains(
        Window(15, 25), 25
    )
    assert not windows.is_closed(Window(15, 25), 27)
    assert windows.is_closed(Window(15, 25), 28)
    assert windows.close_bound(28) == 26
    assert not windows.is_late(25, 38) and windows.is_late(25, 39)


def test_a_session_closes_after_end_plus_gap_plus_grace() -> None:
    windows = session(10, grace_ms=2)

    assert not windows.is_closed(Window(0, 5), 17)
    assert windows.is_closed(Window(0, 5), 18)
    assert windows.close_bound(18) == 6
    assert windows.search_bounds(50) == (40, 60)
    assert windows.is_late(5, 18) and not windows.is_late(6, 18)


def test_a_record_bridging_two_sessions_merges_them() -> None:
    found = [Window(0, 4), Window(20, 30), Window(100, 100)]

    merged = sessions.merge(12, found, gap_ms=8)

    assert merged.session == Window(0, 30)
    assert merged.replaced == (Window(0, 4), Window(20, 30))
    assert not merged.unchanged


def test_a_record_inside_a_session_leaves_its_bounds_and_a_lone_one_starts_its_own() -> None:
    inside = sessions.merge(5, [Window(0, 10)], gap_ms=3)
    assert inside.unchanged and inside.session == Window(0, 10)

    lone = sessions.merge(50, [Window(0, 10)], gap_ms=3)
    assert lone.session == Window(50, 50) and lone.replaced == ()


def test_definitions_are_frozen_values() -> None:
    assert tumbling(10, grace_ms=1) == TimeWindows(10, 10, 1, 11)
    assert session(10, grace_ms=1) == SessionWindows(10, 1, 21)
    with pytest.raises(AttributeError):
        tumbling(10, grace_ms=1).grace_ms = 2  # type: ignore[misc]


def test_a_record_that_would_reopen_a_closed_session_is_late() -> None:
    windows = session(10, grace_ms=0)
    closed = Window(0, 5)  # closed once observed time is past 15

    assert sessions.assign(14, [closed], windows, observed_ms=16) is None
    assert sessions.assign(14, [closed], windows, observed_ms=15) == sessions.merge(
        14, [closed], 10
    )
    lone = sessions.assign(16, [closed], windows, observed_ms=16)
    assert lone is not None and lone.session == Window(16, 16)
    assert sessions.assign(5, [], windows, observed_ms=16) is None  # its own session is closed
