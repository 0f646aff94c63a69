"""The availability benchmark's reading of worker logs: owners, moves, copies and rounds.

The benchmark judges issue 13's targets from these, so what it reads is pinned here with
hand-written log lines of the group member (``membership.transition`` and
``membership.assigned``) and the task manager (``assignment.applied``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from benchmarks.availability import _allowed
from benchmarks.availability_owners import moved_tasks, replay, worker_timeline
from benchmarks.availability_scenarios import FULL

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()


def line(at: float, event: str, **fields: Any) -> dict[str, Any]:
    stamp = dt.datetime.fromtimestamp(T0 + at, dt.UTC).isoformat().replace("+00:00", "Z")
    return {"event": event, "timestamp": stamp, **fields}


def applied(
    at: float, active: list[str], standby: Sequence[str] = (), warmup: Sequence[str] = ()
) -> dict[str, Any]:
    return line(
        at,
        "assignment.applied",
        generation=1,
        active=list(active),
        standby=list(standby),
        warmup=list(warmup),
    )


def test_a_killed_owners_tasks_move_to_their_standbys_and_the_rest_stay() -> None:
    w1 = [
        line(0.0, "membership.transition", src="unjoined", dst="joining"),
        line(3.0, "membership.assigned", active=["0_0", "0_1"]),
        applied(3.0, ["0_0", "0_1"], standby=["0_2"]),
        line(20.0, "membership.transition", src="stable", dst="joining"),
        line(23.0, "membership.assigned", active=["0_0", "0_1", "0_2"]),
        applied(23.0, ["0_0", "0_1", "0_2"]),
        line(23.5, "restore.done", task_id="0_2", role="active", records=0, seconds=0.01),
    ]
    w2 = [
        line(0.0, "membership.transition", src="unjoined", dst="joining"),
        line(3.0, "membership.assigned", active=["0_2"]),
        applied(3.0, ["0_2"], standby=["0_0", "0_1"]),
    ]
    timelines = {
        "w1": worker_timeline("w1", w1, []),
        "w2": worker_timeline("w2", w2, [T0 + 14.0]),
    }
    assert timelines["w1"].rounds == [(T0, T0 + 3.0), (T0 + 20.0, T0 + 23.0)]

    moves = moved_tasks(replay(timelines), timelines, T0 + 14.0, T0 + 30.0)

    assert set(moves) == {"0_2"}
    move = moves["0_2"]
    assert (move.before, move.after, move.had, move.restored) == ("w2", "w1", "standby", 0)
    assert move.handover_seconds == pytest.approx(23.0 - 14.0)  # from the kill
    assert _allowed(move, FULL) == pytest.approx(FULL.commit_interval_ms / 1000 + 1.0)


def test_a_cooperative_move_is_handed_over_in_the_follow_up_round() -> None:
    w1 = [
        line(0.0, "initial_standbys.opened", tasks=["0_1"]),
        line(1.0, "membership.transition", src="joining", dst="syncing"),
        line(2.0, "membership.transition", src="syncing", dst="stable"),
        applied(2.0, [], standby=["0_1"]),  # kept as a standby until w2 gave it up
        line(4.0, "membership.transition", src="stable", dst="joining"),
        line(5.5, "membership.transition", src="syncing", dst="stable"),
        applied(5.5, ["0_1"]),
    ]
    w2 = [applied(-10.0, ["0_0", "0_1"]), applied(3.0, ["0_0"])]
    timelines = {"w1": worker_timeline("w1", w1, []), "w2": worker_timeline("w2", w2, [])}

    moves = moved_tasks(replay(timelines), timelines, T0 + 0.5, T0 + 10.0)

    assert set(moves) == {"0_1"}  # 0_0 stayed on w2 through both rounds
    assert (moves["0_1"].before, moves["0_1"].after) == ("w2", "w1")
    assert moves["0_1"].had == "standby"
    assert moves["0_1"].handover_seconds == pytest.approx(5.5 - 3.0)  # the follow-up round


def test_a_restarted_worker_taking_back_its_tasks_had_them_as_local_state() -> None:
    w1 = [
        applied(0.0, ["0_0"]),
        line(4.0, "membership.transition", src="stable", dst="joining"),  # killed mid-join
        line(10.0, "initial_standbys.opened", tasks=["0_0"]),
        line(10.5, "membership.started"),
        line(11.0, "membership.transition", src="unjoined", dst="joining"),
        line(14.0, "membership.assigned", active=["0_0"]),
        applied(14.0, ["0_0"]),
        line(14.2, "restore.done", task_id="0_0", role="active", records=700, seconds=0.1),
    ]
    w2 = [
        applied(0.0, ["0_1"], standby=["0_0"]),
        applied(7.0, ["0_0", "0_1"]),
        applied(14.0, ["0_1"]),
    ]
    timelines = {
        "w1": worker_timeline("w1", w1, [T0 + 5.0]),
        "w2": worker_timeline("w2", w2, []),
    }
    takeovers = replay(timelines)

    on_stop = moved_tasks(takeovers, timelines, T0 + 4.0, T0 + 9.0)
    on_start = moved_tasks(takeovers, timelines, T0 + 9.0, T0 + 20.0)

    assert (on_stop["0_0"].before, on_stop["0_0"].after, on_stop["0_0"].had) == (
        "w1",
        "w2",
        "standby",
    )
    assert set(on_start) == {"0_0"}
    back = on_start["0_0"]
    assert (back.before, back.after, back.had, back.restored) == ("w2", "w1", "local state", 700)
    assert back.handover_seconds == pytest.approx(0.0)  # taken straight from w2


def test_rounds_end_at_the_assignment_and_a_new_run_starts_afresh() -> None:
    follow_up = [
        line(0.0, "membership.transition", src="stable", dst="joining"),
        line(3.0, "membership.assigned", active=[], revoked=["0_1"]),
        line(3.0, "membership.transition", src="joining", dst="revoking"),
        line(3.1, "membership.transition", src="revoking", dst="joining"),
        line(6.0, "membership.assigned", active=[], revoked=[]),
        line(6.0, "membership.transition", src="joining", dst="stable"),
    ]
    restarted = [
        line(0.0, "membership.transition", src="stable", dst="joining"),  # killed mid-join
        line(5.0, "membership.started"),
        line(5.0, "membership.transition", src="unjoined", dst="joining"),
        line(7.0, "membership.transition", src="joining", dst="syncing"),
        line(9.0, "membership.assigned", active=["0_0"], revoked=[]),
        line(9.0, "membership.transition", src="syncing", dst="stable"),
    ]
    assert worker_timeline("a", follow_up, []).rounds == [(T0, T0 + 3.0), (T0 + 3.1, T0 + 6.0)]
    assert worker_timeline("b", restarted, []).rounds == [(T0 + 5.0, T0 + 9.0)]


def test_a_task_handed_over_in_one_round_moves_when_its_new_owner_takes_it_over() -> None:
    w1 = [applied(0.0, ["0_0", "0_1"]), applied(5.0, ["0_0"], standby=["0_1"])]
    w2 = [
        applied(0.0, [], standby=["0_1"]),
        applied(5.1, [], standby=["0_1"]),  # holds it until w1's release is read
        line(5.4, "handover.taken_over", task_id="0_1", role="standby"),
    ]
    timelines = {"w1": worker_timeline("w1", w1, []), "w2": worker_timeline("w2", w2, [])}

    moves = moved_tasks(replay(timelines), timelines, T0 + 4.0, T0 + 10.0)

    assert set(moves) == {"0_1"}
    move = moves["0_1"]
    assert (move.before, move.after, move.had) == ("w1", "w2", "standby")
    assert move.handover_seconds == pytest.approx(0.4)  # from w1's release to the takeover
