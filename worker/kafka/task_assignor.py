"""The task assignor inside the group member: user data in, :func:`planner.plan`, user data out.

kafka-python calls it on its IO thread: ``metadata`` at every JoinGroup, ``assign`` on the
leader between JoinGroup and SyncGroup, ``on_assignment`` on every member after SyncGroup.
It holds no Kafka connection and decides nothing itself: the leader's decision is the
pure planner's, and this module only translates between kafka-python's protocol objects,
our versioned user data (:mod:`worker.assignment.model`) and tasks. Only ``worker.kafka``
imports kafka-python.

The rebalance protocol is cooperative (KIP-429, :meth:`TaskAssignor.supported_protocols`):
members keep what they own across a rebalance, and the plan never gives a task to a new
owner while another member still owns it (step f of :mod:`worker.assignment.planner`).
Such a task is withheld for one round: its owner loses its partitions in this
assignment, revokes the task and asks for the follow-up round (the member's part), in
which the task goes to its intended owner.

The leader's round, in order (reference/kafka-streams-state.md §4.4-4.5):

1. Tasks from the cluster metadata; clients from the subscriptions (``prev_active`` is
   what each member owns).
2. Each task's changelog partitions (partition ``p`` of each changelog topic of its
   subtopology) and their end offsets from the injected ``end_offsets`` source. Any
   failure there is logged and counts as "unknown": lags then fall back to the members'
   own reports (:mod:`worker.assignment.lags`), so a slow admin request never fails the
   rebalance.
3. Lags per client and task, then :func:`planner.plan` with the leader's wall clock,
   the pending moves of the last plan this leader made (the follow-up round completes
   them; a new leader has none and plans afresh) and the members whose subscription
   says they are leaving (they get nothing; their tasks move in this round).
4. Per member: actives (whose source partitions are the member's assigned partitions,
   so a withheld task's partitions go to nobody this round), standbys (including the
   interim standby of a withheld task on its intended owner), warmups, the pending
   moves that concern it (:func:`_moves_of`), and ``next_probe_ms`` for exactly one
   member (the lowest client key) when warmups need a probing rebalance, so the group
   probes once, not once per member. The group's host maps (standby hosts include
   warmups) go, in version 1, into every assignment; in version 2 only into the
   directory's (the lowest client key with an endpoint), and every assignment names
   the directory's endpoint. ``membership.assign`` logs the withheld moves.

Versions (:mod:`worker.assignment.model`): the leader writes every assignment in the
lowest version the members read (an undecodable subscription counts as version 1), and
this member writes its subscriptions in the version of the last assignment it got.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor, RebalanceProtocol
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from worker.assignment import lags, planner
from worker.assignment.model import (
    ASSIGNMENT_VERSION,
    JSON_VERSION,
    NO_PROBE,
    Assignment,
    Subscription,
    UserDataError,
    user_data_version,
)
from worker.assignment.task_id import TP, TaskId
from worker.clock import Clock, SystemClock
from worker.events import MEMBERSHIP_ASSIGN
from worker.observability import get_logger

ASSIGNOR_NAME = "worker-tasks"

# The log-end offset of each partition; may raise or leave partitions out (unknown).
EndOffsets = Callable[[Sequence[TP]], Mapping[TP, int]]


class TaskAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """The kafka-python assignor adapter: user data in and out, :func:`planner.plan` between.

    Runs on kafka-python's IO thread. ``metadata`` returns the subscription the member
    prepared on its own thread; ``on_assignment`` only parks the decoded result for
    :meth:`take`. ``assign`` (leader only) is pure apart from logging and remembering the
    plan's pending moves for the next ``assign`` (only that thread touches them).
    """

    name = ASSIGNOR_NAME
    version = 0

    def __init__(
        self,
        source_topics: Mapping[int, Sequence[str]],
        config: planner.PlannerConfig,
        changelog_topics: Mapping[int, Sequence[str]] | None = None,
        end_offsets: EndOffsets | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``changelog_topics``: subtopology -> its stores' changelog topics (none: stateless).
        ``end_offsets`` is only called on the leader, inside ``assign``; without it every
        lag is estimated from the members' reports."""
        self._source_topics = {s: tuple(topics) for s, topics in source_topics.items()}
        self._changelog_topics = {s: tuple(t) for s, t in (changelog_topics or {}).items()}
        self._end_offsets = end_offsets
        self._clock = clock if clock is not None else SystemClock()
        self._config = config
        self._log = get_logger(component="membership")
        self._lock = threading.Lock()
        self._subscription = b""
        self._received: Assignment | UserDataError | None = None
        self._pending_moves: Mapping[TaskId, str] = {}
        self._version = JSON_VERSION  # of the last assignment received; guarded by _lock
        self._planned_members = 0  # how many members the last plan made here had

    def supported_protocols(self) -> list[RebalanceProtocol]:
        """Cooperative only (KIP-429): the plan withholds every task that changes owner
        for one round, which is what the cooperative protocol needs; the eager protocol
        (revoke everything at every rebalance) is not supported."""
        return [RebalanceProtocol.COOPERATIVE]

    def set_subscription(self, subscription: Subscription) -> None:
        """The user data of the next JoinGroup, encoded on the member's thread, in the
        version of the last assignment received (version 1 before any).

        Building it there keeps the runtime's state (stores, checkpoints) off the IO thread.
        """
        with self._lock:
            version = self._version
        self._subscription = subscription.encode(version)

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolSubscription:
        """Every JoinGroup (IO thread): our topics plus the prepared user data."""
        return ConsumerProtocolSubscription(self.version, sorted(topics), self._subscription)

    def on_assignment(self, assignment: ConsumerProtocolAssignment, generation: int) -> None:
        """After SyncGroup (IO thread): decode and park for :meth:`take`; never raises."""
        data = bytes(assignment.user_data or b"")
        try:
            received: Assignment | UserDataError = Assignment.decode(data, generation)
        except UserDataError as exc:
            received = exc
        with self._lock:
            self._received = received
            if not isinstance(received, UserDataError):
                self._version = user_data_version(data)

    @property
    def group_reads_compact(self) -> bool:
        """Whether the last assignment came in the compact format, which the leader uses
        only when every member reads it: a group with no worker of an older version, so
        every member takes a released task over in its round (worker/tasks/handover.py)."""
        with self._lock:
            return self._version > JSON_VERSION

    @property
    def planned_alone(self) -> bool:
        """Whether the last round this member planned (as leader) had no other member."""
        return self._planned_members == 1

    def take(self) -> Assignment | None:
        """The assignment received since the last call, if any; raises if it was undecodable."""
        with self._lock:
            received, self._received = self._received, None
        if isinstance(received, UserDataError):
            raise received
        return received

    def assign(self, cluster: Any, members: Sequence[Any]) -> dict[str, ConsumerProtocolAssignment]:
        """Leader (IO thread): the round in the module doc. Never raises for bad user data."""
        partitions = {
            topic: frozenset(cluster.partitions_for_topic(topic) or ())
            for topics in self._source_topics.values()
            for topic in topics
        }
        tasks = self._tasks(partitions)
        subscriptions = {m.member_id: self._decode(m.member_id, m.metadata) for m in members}
        keys = _client_keys(subscriptions)
        leaving = sorted(keys[m] for m, sub in subscriptions.items() if sub.leaving)
        result = self._plan(tasks, {keys[m]: sub for m, sub in subscriptions.items()}, leaving)
        # A task moving this round is active nowhere until its release (or the follow-up
        # round); its queries go to the owner it is moving to, which answers 503 until it
        # runs it, rather than to nobody until the next rebalance.
        routed_active = _merge(result.active, _by_owner(result.pending_moves))
        active_hosts = _hosts(routed_active, subscriptions, keys)
        standby_hosts = _hosts(_merge(result.standby, result.warmup), subscriptions, keys)
        prober = min(set(keys.values()) - set(leaving), default="")
        version = min((s.latest_supported for s in subscriptions.values()), default=JSON_VERSION)
        version = min(version, ASSIGNMENT_VERSION)
        directory = _directory(subscriptions, keys) if version > JSON_VERSION else None
        self._pending_moves = result.pending_moves
        self._planned_members = len(members)
        self._log.info(
            MEMBERSHIP_ASSIGN,
            members=len(members),
            tasks=len(tasks),
            standbys=sum(map(len, result.standby.values())),
            warmups=sum(map(len, result.warmup.values())),
            next_probe_ms=result.next_probe_ms,
            version=version,
            pending_moves=len(result.pending_moves),
            leaving=leaving,
            moves=[f"{task}->{key}" for task, key in sorted(result.pending_moves.items())],
        )
        assignments = {}
        for member, sub in subscriptions.items():
            key = keys[member]
            routed = directory is None or member == directory
            user_data = Assignment(
                result.active[key],
                result.standby[key],
                result.warmup[key],
                active_hosts if routed else {},
                standby_hosts if routed else {},
                result.next_probe_ms if key == prober else NO_PROBE,
                pending_moves=_moves_of(key, sub, result.pending_moves),
                directory=subscriptions[directory].endpoint if directory is not None else "",
            ).encode(version)
            owned = self._partitions(result.active[key], partitions)
            assignments[member] = ConsumerProtocolAssignment(self.version, owned, user_data)
        return assignments

    def _plan(
        self,
        tasks: Sequence[TaskId],
        subscriptions: Mapping[str, Subscription],
        leaving: Sequence[str],
    ) -> planner.Plan:
        """Steps 2 and 3: end offsets, lags, then the pure planner."""
        per_task = lags.changelog_partitions(tasks, self._changelog_topics)
        ends = self._fetch_end_offsets(per_task)
        lag = lags.task_lags(tasks, per_task, ends, subscriptions)
        clients = {
            key: planner.ClientState(key, sub.prev_active, sub.prev_standby, lag.reported[key])
            for key, sub in subscriptions.items()
        }
        stateless = frozenset(t for t, parts in per_task.items() if not parts)
        now_ms = int(self._clock.wall() * 1000)
        return planner.plan(
            tasks,
            clients,
            self._config,
            now_ms,
            stateless,
            _moves(self._pending_moves, subscriptions),
            lag.unreported,
            leaving,
        )

    def _fetch_end_offsets(self, per_task: Mapping[TaskId, Sequence[TP]]) -> dict[TP, int]:
        """Log-end offsets of every changelog partition we could learn; the rest are unknown."""
        wanted = sorted({tp for parts in per_task.values() for tp in parts})
        if not wanted or self._end_offsets is None:
            return {}
        fallback = "highest offset sum the members report"
        try:
            found = self._end_offsets(wanted)
        except Exception as exc:  # any failure only makes lags estimates: never fail the join
            self._log.warning(
                "membership.end_offsets_failed",
                error=repr(exc),
                partitions=len(wanted),
                fallback=fallback,
            )
            return {}
        known = {tp: int(found[tp]) for tp in wanted if tp in found}
        if len(known) < len(wanted):
            self._log.warning(
                "membership.end_offsets_missing",
                missing=len(wanted) - len(known),
                partitions=len(wanted),
                fallback=fallback,
            )
        return known

    def _tasks(self, partitions: Mapping[str, frozenset[int]]) -> list[TaskId]:
        """One task per partition of each subtopology; the widest source topic decides."""
        tasks: list[TaskId] = []
        for subtopology, topics in sorted(self._source_topics.items()):
            counts = {topic: len(partitions[topic]) for topic in topics}
            if len(set(counts.values())) > 1:
                self._log.error(
                    "membership.not_copartitioned", subtopology=subtopology, partitions=counts
                )
            width = max(counts.values(), default=0)
            tasks.extend(TaskId(subtopology, p) for p in range(width))
        return tasks

    def _partitions(
        self, tasks: Iterable[TaskId], partitions: Mapping[str, frozenset[int]]
    ) -> list[tuple[str, list[int]]]:
        """The source partitions of ``tasks``, as kafka-python's (topic, [partition]) list."""
        by_topic: dict[str, list[int]] = {}
        for task in tasks:
            for topic in self._source_topics.get(task.subtopology, ()):
                if task.partition in partitions[topic]:
                    by_topic.setdefault(topic, []).append(task.partition)
        return [(topic, sorted(parts)) for topic, parts in sorted(by_topic.items())]

    def _decode(self, member_id: str, metadata: Any) -> Subscription:
        """A member's subscription; one we cannot read counts as a member with no state."""
        try:
            return Subscription.decode(bytes(metadata.user_data or b""))
        except UserDataError as exc:
            self._log.warning(
                "membership.subscription_undecodable", member_id=member_id, error=str(exc)
            )
            return replace(Subscription.empty(process_id=member_id), latest_supported=JSON_VERSION)


def _moves(
    remembered: Mapping[TaskId, str], subscriptions: Mapping[str, Subscription]
) -> dict[TaskId, str]:
    """The moves under way: this leader's own memory first, then what members echo.

    The echo lets a member that did not plan the previous round (the leader left, or
    another member became leader) finish its moves as planned; all echoes of one round
    agree, and ties go to the lowest client key.
    """
    moves = dict(remembered)
    for key in sorted(subscriptions):
        for task, target in subscriptions[key].pending_moves.items():
            moves.setdefault(task, target)
    return moves


def _moves_of(
    key: str, subscription: Subscription, moves: Mapping[TaskId, str]
) -> dict[TaskId, str]:
    """The moves one member is told of: those it is the target of, and those of tasks it
    runs now. Its echo then keeps every move a surviving party knows about (a move whose
    target and previous owner both left is moot), and no assignment grows with the
    group's moves."""
    return {
        task: target
        for task, target in moves.items()
        if target == key or task in subscription.prev_active
    }


def _directory(subscriptions: Mapping[str, Subscription], keys: Mapping[str, str]) -> str | None:
    """The member whose assignment carries the routing map: the lowest client key among
    those with an endpoint, members that are leaving last (None when no member has one)."""
    reachable = [m for m, sub in subscriptions.items() if sub.endpoint]
    return min(reachable, key=lambda m: (subscriptions[m].leaving, keys[m]), default=None)


def _client_keys(subscriptions: Mapping[str, Subscription]) -> dict[str, str]:
    """Planner key per member: its process id, made unique if two members share one.

    Two members with one process id happen when a process restarts before its previous
    member's session expired; each then counts as a client of its own.
    """
    seen: dict[str, int] = {}
    for sub in subscriptions.values():
        seen[sub.process_id] = seen.get(sub.process_id, 0) + 1
    return {
        member: sub.process_id if seen[sub.process_id] == 1 else f"{sub.process_id}/{member}"
        for member, sub in subscriptions.items()
    }


def _hosts(
    tasks_by_key: Mapping[str, frozenset[TaskId]],
    subscriptions: Mapping[str, Subscription],
    keys: Mapping[str, str],
) -> dict[str, frozenset[TaskId]]:
    """endpoint -> tasks, for query routing; members without an endpoint are left out."""
    hosts: dict[str, frozenset[TaskId]] = {}
    for member, sub in subscriptions.items():
        if sub.endpoint:
            hosts[sub.endpoint] = hosts.get(sub.endpoint, frozenset()) | tasks_by_key[keys[member]]
    return hosts


def _by_owner(moves: Mapping[TaskId, str]) -> dict[str, frozenset[TaskId]]:
    """Pending moves as client key -> the tasks moving to it."""
    owners: dict[str, frozenset[TaskId]] = {}
    for task, key in moves.items():
        owners[key] = owners.get(key, frozenset()) | {task}
    return owners


def _merge(
    first: Mapping[str, frozenset[TaskId]], second: Mapping[str, frozenset[TaskId]]
) -> dict[str, frozenset[TaskId]]:
    """Union per key (standbys and warmups both count as standby hosts for routing)."""
    return {
        key: first.get(key, frozenset()) | second.get(key, frozenset()) for key in {*first, *second}
    }
