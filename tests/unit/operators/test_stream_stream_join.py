"""Stream-stream join edge cases, each a sequence on real stores (tests/support/joining.py).

The property test (tests/property/test_join_stream_stream.py) covers random
interleavings; these pin the boundaries by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.joining import Joining
from worker.operators.joins.stream_stream import Kind, add_stream_stream_join, result_parents
from worker.processing.join_windows import JoinWindows
from worker.processing.topology import Topology
from worker.processing.windows import InvalidWindow
from worker.serde import JSON, STR


def running(tmp_path: Path, windows: JoinWindows, kind: Kind) -> Joining:
    t = Topology().add_source("L", "lt", STR, JSON).add_source("R", "rt", STR, JSON)
    add_stream_stream_join(
        t,
        "J",
        "L",
        "R",
        windows,
        lambda left, right: [left, right],
        kind=kind,
        key_serde=STR,
        left_serde=JSON,
        right_serde=JSON,
    )
    return Joining(t.add_sink("out", "out", result_parents("J"), STR, JSON).build(), tmp_path)


def test_an_unmatched_left_result_waits_while_a_partner_can_still_arrive_at_the_window_edge(
    tmp_path: Path,
) -> None:
    join = running(tmp_path, JoinWindows(before_ms=0, after_ms=0, grace_ms=0), "left")
    try:
        join.feed("lt", "a", 1, 5)
        join.feed("lt", "a", 2, 10)  # stream time 10: the first window [5, 5] has closed
        join.feed("rt", "a", "x", 10)  # on time (not behind stream time): matches the second
        join.feed("lt", "b", 3, 11)
        assert join.outputs("out") == [("a", [1, None], 5), ("a", [2, "x"], 10)]
    finally:
        join.close()


def test_each_arrival_joins_every_match_in_the_window_with_the_later_timestamp(
    tmp_path: Path,
) -> None:
    join = running(tmp_path, JoinWindows(before_ms=10, after_ms=5, grace_ms=100), "inner")
    try:
        for ts, value in ((100, "r1"), (104, "r2"), (106, "r3"), (89, "early")):
            join.feed("rt", "k", value, ts)
        join.feed("lt", "k", "l", 100)  # right records in [90, 105]
        assert join.outputs("out") == [("k", ["l", "r1"], 100), ("k", ["l", "r2"], 104)]
    finally:
        join.close()


def test_a_record_later_than_grace_is_dropped_and_counted(tmp_path: Path) -> None:
    join = running(tmp_path, JoinWindows(before_ms=50, after_ms=50, grace_ms=10), "outer")
    try:
        join.feed("rt", "k", "r", 100)
        join.feed("lt", "k", "late", 89)  # behind stream time 100 by more than 10
        join.feed("lt", "k", "ok", 90)
        assert join.outputs("out") == [("k", ["ok", "r"], 100)]
        assert join.late_records("J-left-store") == 1
    finally:
        join.close()


def test_parked_results_survive_a_restart_and_leave_once_their_window_closes(
    tmp_path: Path,
) -> None:
    join = running(tmp_path, JoinWindows(before_ms=5, after_ms=5, grace_ms=5), "outer")
    try:
        join.feed("lt", "a", 1, 100)
        join.feed("rt", "b", 2, 103)
        join.restart()
        join.feed("lt", "c", 3, 110)  # 110 is not past a's close (100 + 5 + 5)
        assert join.outputs("out") == []
        join.feed("lt", "c", 4, 114)  # past a's close; b's closes at 103 + 5 + 5 = 113
        assert join.outputs("out") == [("a", [1, None], 100), ("b", [None, 2], 103)]
    finally:
        join.close()


def test_null_keys_join_with_none_at_once_on_a_side_that_emits_unmatched_results(
    tmp_path: Path,
) -> None:
    join = running(tmp_path, JoinWindows(before_ms=5, after_ms=5, grace_ms=0), "left")
    try:
        join.feed("lt", None, 1, 100)
        join.feed("rt", None, 2, 100)  # a left join never emits right-only rows
        join.feed("lt", "k", None, 100)  # a null value never joins
        assert join.outputs("out") == [(None, [1, None], 100)]
    finally:
        join.close()


def test_join_windows_refuse_negative_bounds() -> None:
    with pytest.raises(InvalidWindow, match="before_ms"):
        JoinWindows(before_ms=-1, after_ms=0, grace_ms=0)
