"""A member that is leaving (SIGTERM, graceful scale-in): the leader gives it nothing and
moves its tasks in the same round (the planner's step g, the assignor's step 3)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from structlog.testing import capture_logs

from tests.unit.kafka.test_member_states import (
    A,
    B,
    FakeCoordinator,
    Harness,
    _assignment,
    _stable,
)
from tests.unit.kafka.test_task_assignor import (
    EndOffsets,
    _all_tasks,
    _assign,
    _ends,
    _ha_assignor,
    _member,
    _sub,
)
from worker.assignment.model import JSON_VERSION, Subscription
from worker.events import MEMBERSHIP_ASSIGN
from worker.kafka import member_joins, membership
from worker.kafka.member_states import Assigned, MemberState


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


# -- the member's side -----------------------------------------------------------------


@pytest.fixture
def member(monkeypatch: pytest.MonkeyPatch) -> Harness:
    coordinator = FakeCoordinator()
    monkeypatch.setattr(membership, "group_coordinator", coordinator)
    monkeypatch.setattr(member_joins, "group_coordinator", coordinator)
    return Harness(coordinator)


def test_a_member_asked_to_leave_joins_once_more_saying_so_then_has_departed(
    member: Harness,
) -> None:
    _stable(member, A, B)
    assert member.member.begin_leaving()
    assert not member.member.departed
    assert member.member.poll() == []
    assert member.member.state is MemberState.JOINING
    assert member.sent().leaving and member.sent().prev_active == {A, B}
    assert member.member.poll() == []  # one join only
    assert len(member.fake.joins) == 2
    events = member.finish(_assignment(), 2)
    assert events == [Assigned(_assignment().with_generation(2), frozenset({A, B}))]
    assert member.member.departed
    assert member.counter("worker_probing_rebalances_total") == 0


def test_a_member_that_owns_nothing_leaves_at_once(member: Harness) -> None:
    _stable(member)
    assert not member.member.begin_leaving()
    assert member.member.poll() == []
    assert len(member.fake.joins) == 1


def test_a_member_running_tasks_it_took_over_on_their_release_hands_them_over_too(
    member: Harness,
) -> None:
    _stable(member)  # no round has given it A yet: it took A over when A was released
    member.owned = frozenset({A})
    assert member.member.begin_leaving(frozenset({A}))
    assert member.member.poll() == []
    assert member.sent().leaving and member.sent().prev_active == {A}


def test_a_member_in_a_group_of_an_older_version_leaves_at_once(member: Harness) -> None:
    member.member.poll()
    member.finish(_assignment(A, B), 1, version=JSON_VERSION)
    assert not member.member.begin_leaving()


def test_a_join_under_way_finishes_before_the_leaving_one_starts(member: Harness) -> None:
    _stable(member, A, B)
    member.fake.rejoin = True
    member.member.poll()
    assert member.member.begin_leaving()
    assert not member.sent().leaving
    member.finish(_assignment(A, B), 2)
    assert not member.member.departed
    assert member.member.poll() == []
    assert member.sent().leaving
    member.finish(_assignment(), 3)
    assert member.member.departed


def test_the_leader_of_a_group_of_one_leaves_at_once(
    member: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stable(member, A, B)
    monkeypatch.setattr(member.fake, "is_leader", lambda consumer: True)
    member.member._assignor._planned_members = 1
    assert not member.member.begin_leaving()
    member.member._assignor._planned_members = 2
    assert member.member.begin_leaving()
