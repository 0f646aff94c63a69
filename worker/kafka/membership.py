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

When it joins, what its joins say (leaving, a requested rebalance) and what came of
them: :mod:`worker.kafka.member_joins`.

Threading: every method is called from the one processing thread; the assignor's
callbacks run on kafka-python's IO thread and only record (see TaskAssignor). Every use
of kafka-python's private API is in :mod:`worker.kafka.group_coordinator`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import kafka.errors as kerrors
from kafka import KafkaConsumer

from worker.assignment.model import Subscription
from worker.assignment.task_id import TP, TaskId
from worker.clock import Clock, SystemClock
from worker.config import Settings
from worker.errors import FatalError, RebalanceInProgress
from worker.events import (
    MEMBERSHIP_CLOSED,
    MEMBERSHIP_STALE_MEMBER_REMOVED,
    MEMBERSHIP_STARTED,
)
from worker.kafka import group_coordinator, member_offsets
from worker.kafka.error_classifier import group_error
from worker.kafka.member_config import kafka_python_config, planner_config
from worker.kafka.member_joins import MemberJoins
from worker.kafka.member_states import ALLOWED, MembershipEvent, MemberState
from worker.kafka.task_assignor import EndOffsets, TaskAssignor
from worker.lifecycle import StateMachine
from worker.observability import Metrics, get_logger


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
        self._joins = MemberJoins(
            self._fsm,
            self._assignor,
            self._topics,
            subscription,
            lambda: self.generation,
            metrics,
            self._log,
            clock or SystemClock(),
        )

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
    def settled(self) -> bool:
        """In a generation whose round is over with no other due (:meth:`MemberJoins.
        join_due`): what the worker needs to run, as Kafka Streams' RUNNING needs its
        rebalance completed. False before the first round, once dropped and when a
        heartbeat learnt the group is rebalancing. An empty assignment may be settled."""
        consumer = self._consumer
        return (
            consumer is not None
            and self._fsm.state is MemberState.STABLE
            and not self._joins.join_due(consumer)
        )

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
        return self._joins.poll(consumer)

    def handed_over(self) -> None:
        """The runtime released every revoked task in its changelog (worker/tasks/
        handover.py): their new owners hold them already, no follow-up round is needed.
        Only while revoking; otherwise a no-op. During a rolling upgrade (a member of an
        older version still in the group) the follow-up round still runs: an older new
        owner takes a task over only when a round gives it."""
        if self._consumer is not None:
            self._joins.handed_over(self._consumer)

    def begin_leaving(self, running: frozenset[TaskId] = frozenset()) -> bool:
        """Hand the actives over before leaving (:mod:`worker.kafka.member_joins`): a coming
        ``poll`` joins saying so; :attr:`departed` tells when that round came back. False
        (just leave) when it owns no active, holds no generation, leads a group of one, or a
        member of an older version is in the group (it takes tasks over only in a follow-up
        round). Idempotent.

        ``running``: the actives the runtime runs. They include tasks it took over on their
        release since the last assignment (no round has given them to it yet, and none
        needs to); those must be handed over too. Seen on Apache Kafka, where a worker
        stopped right after such a take-over left without releasing them."""
        return self._joins.begin_leaving(running, self._consumer, self.can_commit)

    @property
    def departed(self) -> bool:
        """The round that knew this member is leaving came back (see :meth:`begin_leaving`)."""
        return self._joins.departed

    def request_rebalance(self, reason: str) -> None:
        """Ask the whole group to rebalance (KIP-441 probing: a warmup caught up, or the
        probing time came); carried out by a coming ``poll``.

        The next join's subscription carries a bumped request counter, which makes the
        broker rebalance the group (:mod:`worker.kafka.member_joins`); nothing is revoked for it. Idempotent
        until then; a join already under way is left to finish first. Ignored once left.
        Counts ``worker_probing_rebalances_total`` when the join starts.
        """
        self._joins.request_rebalance(reason)

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
                self._joins.finish(self._settings.session_timeout_ms)
                consumer.close(autocommit=False, timeout_ms=self._settings.session_timeout_ms)
            else:
                group_coordinator.close_without_leaving(consumer)
        except Exception as exc:  # closing must not mask the caller's error
            self._log.warning("membership.close_failed", error=repr(exc))
        self._log.info(MEMBERSHIP_CLOSED, left=leave)

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
