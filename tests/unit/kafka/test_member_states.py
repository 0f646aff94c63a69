"""GroupMember as a state machine: joins that never block, revocations, follow-up rounds,
requested rebalances, a lost generation and commits deferred while the group rebalances.

kafka-python is replaced at our own seam, :mod:`worker.kafka.group_coordinator` (where the
member and its joins import it), by a fake whose joins finish only when the test says so;
the broker's side is shown in tests/integration/test_membership.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import kafka.errors as kerrors
import pytest
from kafka.future import Future
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from tests.support.waiting import wait_until
from worker.assignment.model import ASSIGNMENT_VERSION, JSON_VERSION, Assignment, Subscription
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.config import Settings
from worker.errors import BrokerAccessDenied, FatalError, RebalanceInProgress
from worker.kafka import group_coordinator, member_joins, membership
from worker.kafka.member_config import planner_config
from worker.kafka.member_states import Assigned, Lost, MemberState
from worker.kafka.membership import GroupMember
from worker.observability import Metrics

A, B, C = TaskId(0, 0), TaskId(0, 1), TaskId(0, 2)


class FakeConsumer:
    def __init__(self) -> None:
        self.generation = -1
        self.commits: list[dict[Any, Any]] = []
        self.closed = False

    def group_metadata(self) -> SimpleNamespace:
        return SimpleNamespace(generation_id=self.generation, member_id="m-1")

    def commit(self, offsets: dict[Any, Any], timeout_ms: int | None = None) -> None:
        self.commits.append(offsets)

    def assignment(self) -> set[object]:
        return set()

    def close(self, autocommit: bool, timeout_ms: int) -> None:
        self.closed = True
        self.join_done_at_close = self.join is None or self.join.is_done

    join: Future | None = None
    join_done_at_close: bool | None = None


class FakeCoordinator:
    """Stands in for :mod:`worker.kafka.group_coordinator`; joins finish on ``finish()``."""

    def __init__(self) -> None:
        self.joins: list[Future] = []
        self.rejoin = False
        self.lost = False
        self.rejoins_requested = 0
        self.metadata_known = True
        self.member: GroupMember | None = None

    def start_join(self, consumer: FakeConsumer) -> Future:
        self.rejoin = False
        self.joins.append(Future())
        return self.joins[-1]

    def finish(
        self,
        consumer: FakeConsumer,
        assignment: Assignment,
        generation: int,
        version: int = ASSIGNMENT_VERSION,
    ) -> None:
        """The broker answered: a new generation, the assignor's callback, the future."""
        assert self.member is not None
        consumer.generation = generation
        self.lost = False
        self.member._assignor.on_assignment(
            ConsumerProtocolAssignment(0, [], assignment.encode(version)), generation
        )
        self.joins[-1].success(True)

    def keep_alive(self, consumer: FakeConsumer) -> None:
        pass

    def knows_partitions(self, consumer: FakeConsumer, topics: list[str]) -> bool:
        return self.metadata_known

    def needs_rejoin(self, consumer: FakeConsumer) -> bool:
        return self.rejoin

    def request_rejoin(self, consumer: FakeConsumer) -> None:
        self.rejoins_requested += 1

    def cancel_follow_up(self, consumer: FakeConsumer) -> None:
        self.rejoin = False

    def generation_lost(self, consumer: FakeConsumer) -> bool:
        return self.lost

    def is_leader(self, consumer: FakeConsumer) -> bool:
        return False

    wait_for = staticmethod(group_coordinator.wait_for)  # on the fake's futures, as is


def _assignment(*active: TaskId, standby: tuple[TaskId, ...] = ()) -> Assignment:
    return Assignment(frozenset(active), frozenset(standby), frozenset(), {}, {})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCoordinator]:
    coordinator = FakeCoordinator()
    monkeypatch.setattr(membership, "group_coordinator", coordinator)
    monkeypatch.setattr(member_joins, "group_coordinator", coordinator)
    yield coordinator


class Harness:
    def __init__(self, fake: FakeCoordinator) -> None:
        self.fake = fake
        self.metrics = Metrics()
        self.snapshots: list[Subscription] = []
        self.owned: frozenset[TaskId] = frozenset()

        def subscription() -> Subscription:
            sub = Subscription("p1", "", {}, self.owned, frozenset())
            self.snapshots.append(sub)
            return sub

        self.clock = FakeClock()
        self.member = GroupMember(
            Settings.model_validate({}), {0: ["in"]}, subscription, self.metrics, clock=self.clock
        )
        self.consumer = FakeConsumer()
        self.member._consumer = self.consumer  # type: ignore[assignment]
        fake.member = self.member

    def finish(
        self, assignment: Assignment, generation: int, version: int = ASSIGNMENT_VERSION
    ) -> list[Any]:
        self.fake.finish(self.consumer, assignment, generation, version)
        return self.member.poll()

    def sent(self) -> Subscription:
        """The subscription the last join carried, as the leader decodes it."""
        return Subscription.decode(self.member._assignor.metadata(["in"]).user_data)

    def transitions(self, to: MemberState) -> float:
        value = self.metrics.registry.get_sample_value(
            "worker_membership_transitions_total", {"to": to.value}
        )
        return value or 0.0

    def counter(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name) or 0.0


@pytest.fixture
def harness(fake: FakeCoordinator) -> Harness:
    return Harness(fake)


def _stable(h: Harness, *active: TaskId, generation: int = 1) -> None:
    assert h.member.poll() == []
    events = h.finish(_assignment(*active), generation)
    assert events == [Assigned(_assignment(*active).with_generation(generation), frozenset())]
    h.owned = frozenset(active)
    assert h.member.state is MemberState.STABLE


def test_the_first_poll_starts_a_join_and_returns_at_once(harness: Harness) -> None:
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.JOINING
    assert len(harness.fake.joins) == 1
    for _ in range(3):  # the join is still under way: nothing blocks, nothing repeats
        assert harness.member.poll() == []
    assert len(harness.fake.joins) == 1
    assert len(harness.snapshots) == 1


def test_a_join_waits_for_the_source_topics_metadata_then_for_at_most_a_while(
    harness: Harness,
) -> None:
    harness.fake.metadata_known = False
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.UNJOINED  # a leader would plan no task
    harness.clock.advance(member_joins.METADATA_WAIT_S - 0.1)
    harness.member.poll()
    assert harness.member.state is MemberState.UNJOINED
    harness.clock.advance(0.1)
    harness.member.poll()
    assert harness.member.state is MemberState.JOINING  # a topic may be gone: join anyway


def test_a_join_answered_by_a_new_generation_is_syncing_then_stable(harness: Harness) -> None:
    harness.member.poll()
    harness.consumer.generation = 1  # JoinGroup answered, SyncGroup still under way
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.SYNCING
    events = harness.finish(_assignment(A, B), 1)
    assert events == [Assigned(_assignment(A, B).with_generation(1), frozenset())]
    assert harness.member.state is MemberState.STABLE
    assert harness.member.can_commit and not harness.member.rebalancing
    assert harness.transitions(MemberState.SYNCING) == 1
    assert harness.transitions(MemberState.STABLE) == 1


def test_tasks_kept_through_a_rebalance_are_not_reported_revoked(harness: Harness) -> None:
    _stable(harness, A, B)
    harness.fake.rejoin = True  # a heartbeat learnt that another member joined
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.JOINING
    assert harness.sent().prev_active == frozenset({A, B})
    events = harness.finish(_assignment(A, B, standby=(C,)), 2)
    assert events == [Assigned(_assignment(A, B, standby=(C,)).with_generation(2), frozenset())]
    assert harness.member.state is MemberState.STABLE
    assert len(harness.fake.joins) == 2  # no follow-up round: nothing moved away


def test_lost_actives_are_revoked_then_a_follow_up_join_reports_them_gone(
    harness: Harness,
) -> None:
    _stable(harness, A, B)
    harness.fake.rejoin = True
    harness.member.poll()
    events = harness.finish(_assignment(A), 2)
    assert events == [Assigned(_assignment(A).with_generation(2), frozenset({B}))]
    assert harness.member.state is MemberState.REVOKING
    assert harness.member.can_commit, "the revoked tasks are committed before the hand-over"
    harness.owned = frozenset({A})  # what the runtime did while handling the message

    assert harness.member.poll() == []
    assert harness.member.state is MemberState.JOINING
    assert len(harness.fake.joins) == 3
    assert harness.sent().prev_active == frozenset({A})
    assert harness.counter("worker_follow_up_rebalances_total") == 1


def test_a_requested_rebalance_rejoins_with_new_metadata_and_revokes_nothing(
    harness: Harness,
) -> None:
    _stable(harness, A, B)
    before = harness.sent().rebalance_requests
    harness.member.request_rebalance("warmup caught up")
    assert harness.member.state is MemberState.STABLE  # nothing happens outside poll
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.JOINING
    assert harness.sent().rebalance_requests == before + 1
    assert harness.fake.rejoins_requested >= 2
    assert harness.counter("worker_probing_rebalances_total") == 1
    events = harness.finish(_assignment(A, B), 2)
    assert events == [Assigned(_assignment(A, B).with_generation(2), frozenset())]
    assert harness.member.poll() == []  # done once
    assert len(harness.fake.joins) == 2


def test_a_request_made_while_joining_waits_for_that_join_then_joins_again(
    harness: Harness,
) -> None:
    harness.member.poll()
    harness.member.request_rebalance("probing interval elapsed")
    assert harness.member.poll() == []
    assert len(harness.fake.joins) == 1, "the join under way is not interrupted"
    harness.finish(_assignment(A), 1)
    assert harness.member.poll() == []
    assert len(harness.fake.joins) == 2
    assert harness.sent().rebalance_requests == 1


def test_a_generation_lost_while_stable_reports_every_active_lost_and_rejoins(
    harness: Harness,
) -> None:
    _stable(harness, A, B)
    harness.fake.lost = True
    assert harness.member.poll() == [Lost(frozenset({A, B}))]
    assert harness.member.state is MemberState.UNJOINED
    assert not harness.member.can_commit
    harness.owned = frozenset()
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.JOINING
    events = harness.finish(_assignment(B), 2)
    assert events == [Assigned(_assignment(B).with_generation(2), frozenset())]


def test_a_commit_while_joining_raises_rebalance_in_progress_without_a_request(
    harness: Harness,
) -> None:
    harness.member.poll()
    with pytest.raises(RebalanceInProgress):
        harness.member.commit({("in", 0): 5})
    assert harness.consumer.commits == []
    harness.finish(_assignment(A), 1)
    harness.member.commit({("in", 0): 5})
    assert len(harness.consumer.commits) == 1


def test_a_failed_join_is_retried_when_retriable_and_raised_when_not(harness: Harness) -> None:
    harness.member.poll()
    harness.fake.joins[-1].failure(kerrors.CoordinatorNotAvailableError())
    assert harness.member.poll() == []
    assert harness.member.state is MemberState.JOINING
    harness.member.poll()
    assert len(harness.fake.joins) == 2, "joined again"
    harness.fake.joins[-1].failure(kerrors.GroupAuthorizationFailedError())
    with pytest.raises(BrokerAccessDenied):  # a configuration error: exit 2
        harness.member.poll()


def test_close_leaves_and_further_requests_are_ignored(harness: Harness) -> None:
    _stable(harness, A)
    harness.member.close()
    assert harness.consumer.closed
    assert harness.member.state is MemberState.LEFT
    harness.member.request_rebalance("too late")
    harness.member.close()
    assert harness.counter("worker_probing_rebalances_total") == 0
    with pytest.raises(FatalError, match="closed"):
        harness.member.poll()


def test_the_state_gauge_shows_exactly_the_current_state(harness: Harness) -> None:
    harness.member.poll()
    values = {
        s: harness.metrics.registry.get_sample_value("worker_membership_state", {"state": s.value})
        for s in MemberState
    }
    assert values == {s: (1.0 if s is MemberState.JOINING else 0.0) for s in MemberState}


def test_planner_settings_come_from_the_configuration() -> None:
    settings = Settings.model_validate(
        {
            "num.standby.replicas": 2,
            "max.warmup.replicas": 3,
            "acceptable.recovery.lag": 500,
            "probing.rebalance.interval.ms": 90_000,
        }
    )
    config = planner_config(settings)
    assert (config.num_standby_replicas, config.max_warmup_replicas) == (2, 3)
    assert (config.acceptable_recovery_lag, config.probing_rebalance_interval_ms) == (500, 90_000)


def test_the_moves_under_way_are_echoed_at_the_next_join(harness: Harness) -> None:
    harness.member.poll()
    moving = Assignment(
        frozenset({A}), frozenset({B}), frozenset(), {}, {}, pending_moves={C: "p2"}
    )
    harness.finish(moving, 1)
    harness.fake.rejoin = True
    harness.member.poll()
    assert harness.sent().pending_moves == {C: "p2"}


def test_leaving_waits_for_a_join_under_way_to_finish_first(harness: Harness) -> None:
    harness.member.poll()
    join = harness.consumer.join = harness.fake.joins[-1]

    def finish_once_close_waits() -> None:
        wait_until(lambda: join._callbacks, 10, interval=0.01, message="close to wait")
        harness.fake.finish(harness.consumer, _assignment(A), 1)

    finisher = threading.Thread(target=finish_once_close_waits)
    finisher.start()
    harness.member.close()
    finisher.join(10)

    assert harness.consumer.join_done_at_close is True
    assert harness.member.state is MemberState.LEFT


def test_commits_name_the_newest_generation_the_member_knows_through_a_rebalance(
    harness: Harness,
) -> None:
    _stable(harness, A, B, generation=1)
    harness.fake.rejoin = True
    harness.member.poll()
    assert harness.member.state is MemberState.JOINING
    assert harness.member.commit_generation == (1, "m-1"), "the group's until the join ends"
    harness.consumer.generation = 2  # JoinGroup answered: the group completes the round
    assert harness.member.commit_generation == (2, "m-1")
    harness.member.poll()
    assert harness.member.state is MemberState.SYNCING
    assert harness.member.can_commit, "transactional commits are not refused while syncing"
    harness.finish(_assignment(A, B), 2)
    assert harness.member.commit_generation == (2, "m-1")


def test_no_commit_while_the_member_holds_no_generation(harness: Harness) -> None:
    harness.member.poll()  # the first join: no JoinGroup answer yet
    assert harness.member.state is MemberState.JOINING
    assert not harness.member.can_commit
    assert harness.finish(_assignment(A), 1)
    assert harness.member.can_commit
    harness.fake.lost = True
    assert harness.member.poll() == [Lost(frozenset({A}))]
    assert harness.member.commit_generation is None, "dropped from its generation"
    harness.member.close()
    assert harness.member.commit_generation is None


def test_plain_offset_commits_wait_for_a_settled_generation(harness: Harness) -> None:
    _stable(harness, A, generation=3)
    harness.fake.rejoin = True
    harness.member.poll()
    assert harness.member.can_commit
    with pytest.raises(RebalanceInProgress):
        harness.member.commit({("in", 0): 5})  # kafka-python commits only when settled


def test_revoked_tasks_handed_over_in_this_round_need_no_follow_up_round(
    harness: Harness,
) -> None:
    _stable(harness, A, B)
    harness.fake.rejoin = True
    harness.member.poll()
    events = harness.finish(_assignment(A), 2)
    assert events == [Assigned(_assignment(A).with_generation(2), frozenset({B}))]
    harness.fake.rejoin = True  # kafka-python asks for the follow-up round itself

    harness.member.handed_over()  # the runtime released B in its changelog

    assert harness.member.state is MemberState.STABLE
    assert harness.member.poll() == []
    assert len(harness.fake.joins) == 2, "no follow-up join"
    assert harness.counter("worker_follow_up_rebalances_total") == 0


def test_during_a_rolling_upgrade_a_hand_over_keeps_the_follow_up_round(
    harness: Harness,
) -> None:
    _stable(harness, A, B)
    harness.fake.rejoin = True
    harness.member.poll()
    harness.finish(_assignment(A), 2, version=JSON_VERSION)  # an older member is in the group
    harness.fake.rejoin = True

    harness.member.handed_over()  # an older new owner would not take B over on the release

    assert harness.member.state is MemberState.REVOKING
    assert harness.fake.rejoin, "the follow-up round still gives B to its new owner"
