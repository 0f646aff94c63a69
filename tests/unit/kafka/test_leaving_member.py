"""A member that is leaving (SIGTERM, graceful scale-in): the leader gives it nothing and
moves its tasks in the same round (the planner's step g, the assignor's step 3)."""

from __future__ import annotations

from dataclasses import replace

from structlog.testing import capture_logs

from tests.unit.kafka.test_task_assignor import (
    EndOffsets,
    _all_tasks,
    _assign,
    _ends,
    _ha_assignor,
    _member,
    _sub,
)
from worker.assignment.model import Subscription
from worker.events import MEMBERSHIP_ASSIGN


def test_a_leaving_member_gets_nothing_and_its_tasks_move_to_their_standbys_in_this_round() -> None:
    tasks = sorted(_all_tasks())
    mine, theirs = set(tasks[:4]), set(tasks[4:])
    sums = dict.fromkeys(_all_tasks(), 1_000_000)
    leaving = replace(Subscription.decode(_sub("p1", 1, mine, sums=sums)), leaving=True)
    members = [
        _member("m1", leaving.encode()),
        _member("m2", _sub("p2", 2, theirs, sums=sums, standby=mine)),
    ]
    with capture_logs() as logs:
        result = _assign(members, assignor=_ha_assignor(EndOffsets(_ends(1_000_000))))

    (owned_1, first), (_, second) = result["m1"], result["m2"]
    assert owned_1 == set() and first.active == first.standby == first.warmup == frozenset()
    assert first.pending_moves == second.pending_moves == dict.fromkeys(mine, "p2")
    assert second.active == theirs and mine <= second.standby
    assert first.directory == second.directory == "h:2"  # not the member about to go
    (event,) = [e for e in logs if e["event"] == MEMBERSHIP_ASSIGN]
    assert event["leaving"] == ["p1"]
