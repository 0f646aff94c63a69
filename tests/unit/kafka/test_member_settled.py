"""When the group member counts as settled, the condition of the worker's RUNNING and so
of /readyz: like Kafka Streams' RUNNING, only once a round is over and none is due; an
empty assignment in such a group is settled."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.kafka.test_member_states import A, B, FakeCoordinator, Harness, _assignment, _stable
from worker.kafka import member_joins, membership
from worker.kafka.member_states import Lost, MemberState


@pytest.fixture
def member(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    coordinator = FakeCoordinator()
    monkeypatch.setattr(membership, "group_coordinator", coordinator)
    monkeypatch.setattr(member_joins, "group_coordinator", coordinator)
    yield Harness(coordinator)


def test_a_member_is_not_settled_before_its_first_round_is_over(member: Harness) -> None:
    assert not member.member.settled
    member.member.poll()
    member.consumer.generation = 1  # JoinGroup answered: in a generation, still syncing
    member.member.poll()
    assert member.member.state is MemberState.SYNCING and not member.member.settled
    member.finish(_assignment(A), 1)
    assert member.member.settled


def test_an_empty_assignment_in_a_settled_group_is_settled(member: Harness) -> None:
    _stable(member)
    assert member.member.settled


def test_a_round_learnt_of_by_a_heartbeat_unsettles_the_member_before_it_joins(
    member: Harness,
) -> None:
    _stable(member)
    member.fake.rejoin = True  # kafka-python: the group is rebalancing, no join started yet
    assert member.member.state is MemberState.STABLE
    assert not member.member.settled


def test_a_requested_rebalance_unsettles_the_member_until_its_round_is_over(
    member: Harness,
) -> None:
    _stable(member, A)
    member.member.request_rebalance("warmup caught up")
    assert not member.member.settled
    member.member.poll()
    assert not member.member.settled
    member.finish(_assignment(A), 2)
    assert member.member.settled


def test_a_member_revoking_or_dropped_from_its_generation_is_not_settled(
    member: Harness,
) -> None:
    _stable(member, A, B)
    member.fake.rejoin = True
    member.member.poll()
    member.finish(_assignment(A), 2)
    assert member.member.state is MemberState.REVOKING and not member.member.settled
    member.owned = frozenset({A})
    member.member.poll()
    member.finish(_assignment(A), 3)
    assert member.member.settled
    member.fake.lost = True
    assert member.member.poll() == [Lost(frozenset({A}))]
    member.fake.metadata_known = False  # the rejoin waits for metadata: still unsettled
    assert member.member.poll() == []
    assert member.member.state is MemberState.UNJOINED and not member.member.settled
