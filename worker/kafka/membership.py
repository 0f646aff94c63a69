"""The group member: kafka-python joins the group and runs our task assignor; it never fetches.

confluent-kafka cannot run a custom assignor (platform-facts.md), so membership and task
assignment use a kafka-python ``KafkaConsumer`` with :class:`TaskAssignor`, while all data
flows through confluent-kafka elsewhere. Offset commits go through this member so the
broker fences them with the group generation.

Off the processing path. The member never blocks its caller for a rebalance: a join
(JoinGroup, the leader's assignment, SyncGroup) runs on kafka-python's own IO thread
(:func:`group_coordinator.start_join`), and :meth:`GroupMember.poll` only looks at how it
is going and returns what came of it as messages (:class:`Assigned`, :class:`Lost`). The
processing loop applies them between batches, so records keep flowing, restores and
standbys keep reading and HTTP keeps answering while the group rebalances.

Commits through a rebalance. Kafka's coordinator fences a transactional offset commit by
the generation it names, never by the group's state (docs/platform-notes.md), so whenever
the member holds a generation it names the newest it knows
(:attr:`GroupMember.commit_generation`), joining and syncing included; one that raced the
JoinGroup answer is refused and under exactly-once revives the running tasks.

Cooperative rebalancing (KIP-429). The assignor declares the cooperative protocol, the
subscription carries the tasks this member owns, and the leader never makes a task
active on a new owner in the generation in which another member still owns it. A member
therefore keeps every task the new assignment leaves it without a pause; the actives it
lost it commits and hands over while handling :class:`Assigned`. Their new owners hold
them as standbys until they read the release (worker/tasks/handover.py), so no further
round is needed (:meth:`GroupMember.handed_over`); a task that cannot be released that
way needs one more join (the follow-up round). The lifecycle, an explicit state machine::

    UNJOINED -> JOINING -> SYNCING -> STABLE <-> JOINING ...
                              |  \\-> REVOKING -> JOINING (follow-up round) or STABLE
    (any) -> LEFT;  JOINING/SYNCING/REVOKING/STABLE -> UNJOINED when the group dropped us

Leaving gracefully (:meth:`GroupMember.begin_leaving`). A stopping member joins once
more saying it is leaving; the leader moves its actives in that round, the runtime
releases them like any revoked task and only then closes the member (LeaveGroup). They
keep being processed through the join instead of stalling until a round after it.

Asking for a rebalance (:meth:`GroupMember.request_rebalance`, KIP-441's probing
rebalance). kafka-python has no public ``enforceRebalance``; a rejoin whose subscription
is unchanged is answered with the previous assignment, without a rebalance, by Kafka (for
a follower) and by the test broker (for anyone). Like Kafka Streams' ``uniqueField``, the
subscription carries a counter this member bumps for every request, so the broker sees
new metadata and rebalances the group, and no member has to leave for it.

Threading: every method is called from the one processing thread; the assignor's
callbacks run on kafka-python's IO thread and only record (see TaskAssignor). Every use
of kafka-python's private API is in :mod:`worker.kafka.group_coordinator`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import kafka.errors as kerrors
from kafka import KafkaConsumer
from kafka.future import Future

from worker.assignment.model import Subscription
from worker.assignment.task_id import TP, TaskId
from worker.clock import Clock, SystemClock
from worker.config import Settings
from worker.errors import FatalError, RebalanceInProgress
from worker.events import (
    MEMBERSHIP_ASSIGNED,
    MEMBERSHIP_CLOSED,
    MEMBERSHIP_STALE_MEMBER_REMOVED,
    MEMBERSHIP_STARTED,
)
from worker.kafka import group_coordinator, member_offsets
from worker.kafka.error_classifier import group_error, join_can_be_retried
from worker.kafka.member_config import kafka_python_config, planner_config
from worker.kafka.member_states import ALLOWED, Assigned, Lost, MembershipEvent, MemberState
from worker.kafka.task_assignor import EndOffsets, TaskAssignor
from worker.lifecycle import StateMachine
from worker.observability import Metrics, get_logger

# How long a join waits for the source topics' metadata before it starts without it.
METADATA_WAIT_S = 10.0


class GroupMember:
    """This process's membership of the application's group (group id = ``application.id``).

    Lifecycle: ``start()`` once, then ``poll()`` on every loop iteration, ``commit()`` and
    ``committed()`` when needed, ``close()`` at the end (idempotent), all from ONE thread.
    None of them waits for a rebalance. Not thread-safe.
    """

    def __init__(
        self,
        settings: Settings,
        source_topics: Mapping[int, Sequence[str]],
        subscription: Callable[[], Subscription],
        metrics: Metrics,
        changelog_topics: Mapping[int, Sequence[str]] | None = None,
        end_offsets: EndOffsets | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``subscription`` is called at the start of every join, on the calling thread,
        for what this member reports (its owned tasks and offset sums).
        ``changelog_topics`` (subtopology -> its stores' changelog topics) and
        ``end_offsets`` (log-end offset per partition; may raise or answer partially) feed
        the leader's lag computation; ``clock`` gives the leader's wall clock for the
        probing time. See :class:`TaskAssignor`."""
        self._settings = settings
        self._topics = sorted({t for topics in source_topics.values() for t in topics})
        self._subscription = subscription
        self._metrics = metrics
        self._assignor = TaskAssignor(
            source_topics,
            planner_config(settings),
            changelog_topics=changelog_topics,
            end_offsets=end_offsets,
            clock=clock,
        )
        self._log = get_logger(component="membership", group=settings.application_id)
        self._clock = clock or SystemClock()
        self._metadata_wait_since: float | None = None  # a join waiting for topic metadata
        self._consumer: KafkaConsumer | None = None
        self._fsm = StateMachine(
            "membership",
            MemberState.UNJOINED,
            ALLOWED,
            self._log,
            transitions=metrics.membership_transitions,
            gauge=metrics.membership_state,
            repeat_ok=True,
        )
        self._join: Future | None = None  # the join under way on kafka-python's IO thread
        self._join_generation = -1  # the generation the member was in when the join began
        self._owned: frozenset[TaskId] = frozenset()  # actives of the latest assignment
        self._rebalance_reason: str | None = None  # a requested rebalance not yet joined
        self._rebalance_requests = 0
        self._pending_moves: Mapping[TaskId, str] = {}  # echoed to whoever leads next
        self._leaving = False  # asked to leave: every join from now says so
        self._leaving_joined = False  # a join saying so has started
        self._departed = False  # the round of such a join came back

    @property
    def state(self) -> MemberState:
        return self._fsm.state

    def _transition(self, target: MemberState, reason: str = "", **why: Any) -> None:
        self._fsm.transition(target, reason, generation=self.generation, **why)

    def start(self, stale_member_id: str | None = None) -> None:
        """Connect and subscribe with our assignor; the first join starts at ``poll``.

        ``stale_member_id``: the member id of this process's previous run, which was
        killed and so is still in the group until its session times out. Until then the
        broker waits for it to rejoin (Kafka) or gives it tasks nobody processes (the test
        broker); removing it first lets the join finish at once. Only dynamic members do
        this: Kafka replaces a static member (``group.instance.id``) by itself.

        Raises KafkaUnavailable when no broker answers within the bootstrap timeout.
        """
        if self._consumer is not None or self._fsm.state is MemberState.LEFT:
            return
        try:
            consumer = KafkaConsumer(
                **kafka_python_config(self._settings),
                partition_assignment_strategy=[self._assignor],
            )
        except kerrors.KafkaError as exc:
            raise group_error(exc) from exc
        if stale_member_id and not self._settings.group_instance_id:
            settings = self._settings
            error = group_coordinator.leave_on_behalf(
                consumer, settings.application_id, stale_member_id, settings.session_timeout_ms
            )
            self._log.info(
                MEMBERSHIP_STALE_MEMBER_REMOVED, member_id=stale_member_id, error=error or None
            )
        consumer.subscribe(topics=self._topics)
        self._consumer = consumer
        self._log.info(MEMBERSHIP_STARTED, topics=self._topics)

    @property
    def generation(self) -> int:
        """The group generation this member is in now, -1 when in none."""
        return self._group_metadata()[0]

    @property
    def member_id(self) -> str:
        """The id the broker gave this member ('' before the first join)."""
        return self._group_metadata()[1]

    @property
    def is_leader(self) -> bool:
        """Whether this member planned the current generation."""
        return self._consumer is not None and group_coordinator.is_leader(self._consumer)

    @property
    def coordinator_known(self) -> bool:
        """Whether the coordinator is known and answering: False while the broker is away
        (for readiness; see :func:`group_coordinator.coordinator_reachable`)."""
        consumer = self._consumer
        return consumer is not None and group_coordinator.coordinator_reachable(consumer)

    @property
    def commit_generation(self) -> tuple[int, str] | None:
        """The (generation, member id) a commit names now: the newest generation the
        member knows, joining and syncing included (module doc); None while it holds none
        (before its first JoinGroup answer, dropped, or left)."""
        if self._fsm.state in (MemberState.UNJOINED, MemberState.LEFT):
            return None
        generation, member_id = self._group_metadata()
        return (generation, member_id) if generation >= 0 and member_id else None

    @property
    def can_commit(self) -> bool:
        """Whether a commit fenced by the generation can be made now (:attr:`commit_generation`)."""
        return self.commit_generation is not None

    @property
    def rebalancing(self) -> bool:
        """True from the start of a join until its assignment has been handed over."""
        return self._fsm.state in (MemberState.JOINING, MemberState.SYNCING, MemberState.REVOKING)

    @property
    def assigned_partitions(self) -> frozenset[TP]:
        """What the group gave this member: exactly the source partitions of its actives."""
        owned = self._consumer.assignment() if self._consumer is not None else ()
        return frozenset((tp.topic, tp.partition) for tp in owned)

    def poll(self) -> list[MembershipEvent]:
        """Keep the membership alive and move rebalances on; never blocks. In order:

        1. Tell kafka-python the member is alive (its poll-interval timer).
        2. A join under way: note when the JoinGroup was answered (SYNCING); when it has
           finished, return :class:`Assigned` with the actives it took away (REVOKING,
           the follow-up join starts at the next poll) or none (STABLE).
        3. Stable or revoking, but the broker dropped this member from its generation:
           return :class:`Lost` with every active it owned.
        4. Start a join when one is due: the follow-up round after revoking, a rebalance
           kafka-python learnt of (a heartbeat, metadata), or one this member asked for.
           The subscription is snapshotted now, after the runtime handed over whatever
           the previous assignment revoked, so it reports what this member really owns.

        Raises TaskMigrated/KafkaUnavailable/FatalError (see :func:`worker.kafka.error_classifier.group_error`), and
        UnsupportedVersion when the leader sent a format this worker cannot read.
        """
        consumer = self._require()
        try:
            group_coordinator.keep_alive(consumer)
        except kerrors.KafkaError as exc:
            self._log.warning("membership.heartbeat_failed", error=repr(exc))
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
            if self._fsm.state is MemberState.JOINING and self.generation != self._join_generation:
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

    def _maybe_join(self, consumer: KafkaConsumer) -> None:
        """Step 4."""
        follow_up = self._fsm.state is MemberState.REVOKING
        leave = self._leaving and not self._leaving_joined
        if not (
            self._fsm.state is not MemberState.STABLE  # never joined, lost, failed, follow-up
            or self._rebalance_reason is not None
            or leave
            or group_coordinator.needs_rejoin(consumer)
        ):
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
        self._join_generation = self.generation
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

    def handed_over(self) -> None:
        """The runtime released every revoked task in its changelog (worker/tasks/
        handover.py): their new owners hold them already, no follow-up round is needed.
        Only while revoking; otherwise a no-op. During a rolling upgrade (a member of an
        older version still in the group) the follow-up round still runs: an older new
        owner takes a task over only when a round gives it."""
        if self._fsm.state is not MemberState.REVOKING or self._consumer is None:
            return
        if not self._assignor.group_reads_compact:
            return
        group_coordinator.cancel_follow_up(self._consumer)
        self._transition(MemberState.STABLE, reason="handed over in this round")

    def begin_leaving(self, running: frozenset[TaskId] = frozenset()) -> bool:
        """Hand the actives over before leaving (module doc): a coming ``poll`` joins saying
        so; :attr:`departed` tells when that round came back. False (just leave) when it
        owns no active, holds no generation, leads a group of one, or a member of an older
        version is in the group (it takes tasks over only in a follow-up round). Idempotent.

        ``running``: the actives the runtime runs. They include tasks it took over on their
        release since the last assignment (no round has given them to it yet, and none
        needs to); those must be handed over too. Seen on Apache Kafka, where a worker
        stopped right after such a take-over left without releasing them."""
        if self._leaving:
            return True
        owned = self._owned | running
        if not owned or self.commit_generation is None or self._consumer is None:
            return False
        alone = self.is_leader and self._assignor.planned_alone
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
        """Ask the whole group to rebalance (KIP-441 probing: a warmup caught up, or the
        probing time came); carried out by a coming ``poll``.

        The next join's subscription carries a bumped request counter, which makes the
        broker rebalance the group (module doc); nothing is revoked for it. Idempotent
        until then; a join already under way is left to finish first. Ignored once left.
        Counts ``worker_probing_rebalances_total`` when the join starts.
        """
        if self._fsm.state is MemberState.LEFT:
            return
        self._rebalance_reason = reason
        self._log.info("membership.rebalance_requested", reason=reason)

    def commit(
        self,
        offsets: Mapping[TP, int],
        metadata: Mapping[TP, str] | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Synchronously commit next-offsets-to-consume, each with its ``metadata`` string
        (the task's stream time), fenced by the current generation.

        Raises RebalanceInProgress while the group rebalances (kafka-python's commit needs a
        settled generation; retry then), TaskMigrated when the group went on without this
        member, and KafkaUnavailable on timeouts or no coordinator.
        """
        if not offsets:
            return
        consumer = self._require()
        if self._fsm.state not in (MemberState.STABLE, MemberState.REVOKING):
            raise RebalanceInProgress(f"the group member is {self._fsm.state.value}")
        member_offsets.commit(consumer, offsets, metadata or {}, timeout_ms)

    def committed(
        self, partitions: Iterable[TP], timeout_ms: int | None = None
    ) -> dict[TP, int | None]:
        """The group's committed offsets (None where nothing was committed), in one request."""
        found = self.committed_with_metadata(partitions, timeout_ms)
        return {tp: offset for tp, (offset, _) in found.items()}

    def committed_with_metadata(
        self, partitions: Iterable[TP], timeout_ms: int | None = None
    ) -> dict[TP, tuple[int | None, str]]:
        """The group's committed offsets and their metadata strings, in one request
        (:func:`worker.kafka.member_offsets.committed_with_metadata`)."""
        return member_offsets.committed_with_metadata(self._require(), partitions, timeout_ms)

    def close(self, leave: bool = True) -> None:
        """Stop the member; with ``leave`` send LeaveGroup so the rest rebalance at once.

        Without ``leave`` the group notices only when the session times out (a crash).
        A join under way is let finish first (at most a session timeout): a leader that
        left between its JoinGroup and SyncGroup wedged the test broker's group for good,
        on Kafka it costs the others a round. Idempotent; errors are logged, not raised.
        """
        consumer, self._consumer = self._consumer, None
        if self._fsm.state is not MemberState.LEFT:
            self._transition(MemberState.LEFT, leave=leave)
        if consumer is None:
            return
        try:
            if leave:
                self._finish_join()
                consumer.close(autocommit=False, timeout_ms=self._settings.session_timeout_ms)
            else:
                group_coordinator.close_without_leaving(consumer)
        except Exception as exc:  # closing must not mask the caller's error
            self._log.warning("membership.close_failed", error=repr(exc))
        self._log.info(MEMBERSHIP_CLOSED, left=leave)

    def _finish_join(self) -> None:
        join, self._join = self._join, None
        if join is not None and not join.is_done:
            finished = group_coordinator.wait_for(join, self._settings.session_timeout_ms)
            self._log.info("membership.join_finished_before_leaving", finished=finished)

    def _group_metadata(self) -> tuple[int, str]:
        if self._consumer is None:
            return -1, ""
        meta = self._consumer.group_metadata()
        return int(meta.generation_id), str(meta.member_id or "")

    def _require(self) -> KafkaConsumer:
        if self._consumer is None:
            state = "closed" if self._fsm.state is MemberState.LEFT else "not started"
            raise FatalError(f"group member is {state}")
        return self._consumer
