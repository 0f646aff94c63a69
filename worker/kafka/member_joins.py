"""The group member's rebalance rounds: when it joins, what its joins say, what came of them.

:class:`MemberJoins` starts a join when one is due, follows it while it runs on
kafka-python's IO thread (:func:`group_coordinator.start_join`), and turns its end into
the messages the processing loop applies (:class:`Assigned`, :class:`Lost`). It moves
the member's lifecycle (worker/kafka/membership.py) through every state but LEFT.

Leaving gracefully (:meth:`MemberJoins.begin_leaving`). A stopping member joins once
more saying it is leaving; the leader moves its actives in that round, the runtime
releases them like any revoked task and only then closes the member (LeaveGroup). They
keep being processed through the join instead of stalling until a round after it.

Asking for a rebalance (:meth:`MemberJoins.request_rebalance`, KIP-441's probing
rebalance). kafka-python has no public ``enforceRebalance``; a rejoin whose subscription
is unchanged is answered with the previous assignment, without a rebalance, by Kafka (for
a follower) and by the test broker (for anyone). Like Kafka Streams' ``uniqueField``, the
subscription carries a counter this member bumps for every request, so the broker sees
new metadata and rebalances the group, and no member has to leave for it.

Threading: called from the one processing thread only, through the member. Not
thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kafka import KafkaConsumer
from kafka.future import Future

from worker.assignment.model import Subscription
from worker.assignment.task_id import TaskId
from worker.clock import Clock
from worker.events import MEMBERSHIP_ASSIGNED
from worker.kafka import group_coordinator
from worker.kafka.error_classifier import group_error, join_can_be_retried
from worker.kafka.member_states import Assigned, Lost, MembershipEvent, MemberState
from worker.kafka.task_assignor import TaskAssignor
from worker.lifecycle import StateMachine
from worker.observability import Metrics

# How long a join waits for the source topics' metadata before it starts without it.
METADATA_WAIT_S = 10.0


class MemberJoins:
    """The joins of one group member (:class:`worker.kafka.membership.GroupMember`).

    ``fsm`` is the member's lifecycle, ``generation`` the group generation the member is
    in now (-1 when in none); ``subscription`` is called at the start of every join for
    what this member reports. Not thread-safe.
    """

    def __init__(
        self,
        fsm: StateMachine[MemberState],
        assignor: TaskAssignor,
        topics: Sequence[str],
        subscription: Callable[[], Subscription],
        generation: Callable[[], int],
        metrics: Metrics,
        log: Any,
        clock: Clock,
    ) -> None:
        self._fsm = fsm
        self._assignor = assignor
        self._topics = topics
        self._subscription = subscription
        self._generation = generation
        self._metrics = metrics
        self._log = log
        self._clock = clock
        self._metadata_wait_since: float | None = None  # a join waiting for topic metadata
        self._join: Future | None = None  # the join under way on kafka-python's IO thread
        self._join_generation = -1  # the generation the member was in when the join began
        self._owned: frozenset[TaskId] = frozenset()  # actives of the latest assignment
        self._rebalance_reason: str | None = None  # a requested rebalance not yet joined
        self._rebalance_requests = 0
        self._pending_moves: Mapping[TaskId, str] = {}  # echoed to whoever leads next
        self._leaving = False  # asked to leave: every join from now says so
        self._leaving_joined = False  # a join saying so has started
        self._departed = False  # the round of such a join came back

    def _transition(self, target: MemberState, reason: str = "", **why: Any) -> None:
        self._fsm.transition(target, reason, generation=self._generation(), **why)

    def poll(self, consumer: KafkaConsumer) -> list[MembershipEvent]:
        """Steps 2 to 4 of :meth:`worker.kafka.membership.GroupMember.poll`."""
        if self._join is not None:
            return self._follow_join()
        if self._fsm.state in (MemberState.STABLE, MemberState.REVOKING) and (
            group_coordinator.generation_lost(consumer)
        ):
            lost, self._owned = self._owned, frozenset()
            self._transition(MemberState.UNJOINED, reason="dropped from the generation")
            return [Lost(lost)]
        self._maybe_join(consumer)
        return []

    def _follow_join(self) -> list[MembershipEvent]:
        """Step 2."""
        join = self._join
        assert join is not None
        if not join.is_done:
            if (
                self._fsm.state is MemberState.JOINING
                and self._generation() != self._join_generation
            ):
                self._transition(MemberState.SYNCING)
            return []
        self._join = None
        if join.failed():
            exc = join.exception
            if join_can_be_retried(exc):
                self._log.warning("membership.join_failed", error=repr(exc), retry=True)
                return []  # still JOINING/SYNCING: the next poll starts the join again
            raise group_error(exc) from exc
        assignment = self._assignor.take()
        if assignment is None:
            # The join ended without an assignment for us (kafka-python refused it, e.g.
            # a topic vanished, and asked for a rejoin): join again at the next poll.
            self._log.warning("membership.join_without_assignment")
            return []
        revoked = self._owned - assignment.active
        self._owned = assignment.active
        self._departed = self._leaving_joined
        self._pending_moves = assignment.pending_moves
        self._metrics.rebalances.inc()
        self._log.info(
            MEMBERSHIP_ASSIGNED,
            generation=assignment.generation,
            active=sorted(map(str, assignment.active)),
            revoked=sorted(map(str, revoked)),
            standby=len(assignment.standby),
            warmup=len(assignment.warmup),
        )
        self._transition(MemberState.REVOKING if revoked else MemberState.STABLE)
        return [Assigned(assignment, revoked)]

    def join_due(self, consumer: KafkaConsumer) -> bool:
        """Whether a join should start (step 4): the member is not stable (never joined,
        lost, a failed join, the follow-up round), a rebalance was requested, it is
        leaving, or kafka-python learnt of a rebalance (a heartbeat, metadata)."""
        return (
            self._fsm.state is not MemberState.STABLE
            or self._rebalance_reason is not None
            or (self._leaving and not self._leaving_joined)
            or group_coordinator.needs_rejoin(consumer)
        )

    def _maybe_join(self, consumer: KafkaConsumer) -> None:
        """Step 4."""
        follow_up = self._fsm.state is MemberState.REVOKING
        leave = self._leaving and not self._leaving_joined
        if not self.join_due(consumer):
            return
        if not self._metadata_known(consumer):
            return
        reason = "leaving" if leave else "follow-up" if follow_up else self._rebalance_reason
        if reason is not None and reason not in ("follow-up", "leaving"):
            self._rebalance_requests += 1
            self._metrics.probing_rebalances.inc()
        if follow_up:
            self._metrics.follow_up_rebalances.inc()
        group_coordinator.request_rejoin(consumer)
        self._assignor.set_subscription(
            replace(
                self._subscription(),
                rebalance_requests=self._rebalance_requests,
                pending_moves=self._pending_moves,
                leaving=self._leaving,
            )
        )
        self._leaving_joined = self._leaving
        self._rebalance_reason = None  # this join carries everything the request was about
        self._join_generation = self._generation()
        self._join = group_coordinator.start_join(consumer)
        self._transition(MemberState.JOINING, reason=reason or "group rebalancing")

    def _metadata_known(self, consumer: KafkaConsumer) -> bool:
        """Whether a join may start: kafka-python knows every source topic's partitions
        (:func:`group_coordinator.knows_partitions`), or it has been waited for
        METADATA_WAIT_S (a topic deleted meanwhile: the leader then plans without it,
        as before)."""
        if group_coordinator.knows_partitions(consumer, self._topics):
            self._metadata_wait_since = None
            return True
        now = self._clock.monotonic()
        if self._metadata_wait_since is None:
            self._metadata_wait_since = now
        if now - self._metadata_wait_since < METADATA_WAIT_S:
            return False
        self._log.warning("membership.join_without_metadata", topics=self._topics)
        self._metadata_wait_since = None
        return True

    def handed_over(self, consumer: KafkaConsumer) -> None:
        """See :meth:`worker.kafka.membership.GroupMember.handed_over`."""
        if self._fsm.state is not MemberState.REVOKING:
            return
        if not self._assignor.group_reads_compact:
            return
        group_coordinator.cancel_follow_up(consumer)
        self._transition(MemberState.STABLE, reason="handed over in this round")

    def begin_leaving(
        self, running: frozenset[TaskId], consumer: KafkaConsumer | None, can_commit: bool
    ) -> bool:
        """See :meth:`worker.kafka.membership.GroupMember.begin_leaving`."""
        if self._leaving:
            return True
        owned = self._owned | running
        if not owned or not can_commit or consumer is None:
            return False
        alone = group_coordinator.is_leader(consumer) and self._assignor.planned_alone
        if alone or not self._assignor.group_reads_compact:
            return False
        self._leaving = True
        self._log.info("membership.leaving", active=sorted(map(str, owned)))
        return True

    @property
    def departed(self) -> bool:
        """The round that knew this member is leaving came back (see :meth:`begin_leaving`)."""
        return self._departed

    def request_rebalance(self, reason: str) -> None:
        """See :meth:`worker.kafka.membership.GroupMember.request_rebalance`."""
        if self._fsm.state is MemberState.LEFT:
            return
        self._rebalance_reason = reason
        self._log.info("membership.rebalance_requested", reason=reason)

    def finish(self, timeout_ms: int) -> None:
        """Let a join under way finish before the member leaves (at most ``timeout_ms``)."""
        join, self._join = self._join, None
        if join is not None and not join.is_done:
            finished = group_coordinator.wait_for(join, timeout_ms)
            self._log.info("membership.join_finished_before_leaving", finished=finished)
