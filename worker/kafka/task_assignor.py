"""The task assignor inside the group member: user data in, :func:`planner.plan`, user data out.

kafka-python calls it on its IO thread: ``metadata`` at every JoinGroup, ``assign`` on the
leader between JoinGroup and SyncGroup, ``on_assignment`` on every member after SyncGroup.
It holds no Kafka connection and decides nothing itself: the leader's decision is the
pure planner's, and this module only translates between kafka-python's protocol objects,
our versioned user data (:mod:`worker.assignment.model`) and tasks. Only ``worker.kafka``
imports kafka-python.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from worker.assignment import planner
from worker.assignment.model import NO_PROBE, Assignment, Subscription, UserDataError
from worker.assignment.task_id import TaskId
from worker.observability import get_logger

ASSIGNOR_NAME = "worker-tasks"


class TaskAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """The kafka-python assignor adapter: user data in and out, :func:`planner.plan` between.

    Runs on kafka-python's IO thread. ``metadata`` returns the subscription the member
    prepared on its own thread; ``on_assignment`` only parks the decoded result for
    :meth:`take`. ``assign`` (leader only) is pure apart from logging.
    """

    name = ASSIGNOR_NAME
    version = 0

    def __init__(self, source_topics: Mapping[int, Sequence[str]], config: planner.PlannerConfig):
        self._source_topics = {s: tuple(topics) for s, topics in source_topics.items()}
        self._config = config
        self._log = get_logger(component="membership")
        self._lock = threading.Lock()
        self._subscription = b""
        self._received: Assignment | UserDataError | None = None

    def set_subscription(self, subscription: Subscription) -> None:
        """The user data of the next JoinGroup, encoded on the member's thread.

        Building it there keeps the runtime's state (stores, checkpoints) off the IO thread.
        """
        self._subscription = subscription.encode()

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolSubscription:
        """Every JoinGroup (IO thread): our topics plus the prepared user data."""
        return ConsumerProtocolSubscription(self.version, sorted(topics), self._subscription)

    def on_assignment(self, assignment: ConsumerProtocolAssignment, generation: int) -> None:
        """After SyncGroup (IO thread): decode and park for :meth:`take`; never raises."""
        try:
            received: Assignment | UserDataError = Assignment.decode(
                bytes(assignment.user_data or b""), generation
            )
        except UserDataError as exc:
            received = exc
        with self._lock:
            self._received = received

    def take(self) -> Assignment | None:
        """The assignment received since the last call, if any; raises if it was undecodable."""
        with self._lock:
            received, self._received = self._received, None
        if isinstance(received, UserDataError):
            raise received
        return received

    def assign(self, cluster: Any, members: Sequence[Any]) -> dict[str, ConsumerProtocolAssignment]:
        """Leader: tasks from the cluster metadata, clients from the subscriptions, then plan."""
        partitions = {
            topic: frozenset(cluster.partitions_for_topic(topic) or ())
            for topics in self._source_topics.values()
            for topic in topics
        }
        tasks = self._tasks(partitions)
        subscriptions = {m.member_id: self._decode(m.member_id, m.metadata) for m in members}
        keys = _client_keys(subscriptions)
        clients = {
            keys[member]: planner.ClientState(
                keys[member], sub.prev_active, sub.prev_standby, sub.task_offset_sums
            )
            for member, sub in subscriptions.items()
        }
        result = planner.plan(tasks, clients, self._config)
        active_hosts = _hosts(result.active, subscriptions, keys)
        standby_hosts = _hosts(result.standby, subscriptions, keys)
        self._log.info("membership.assign", members=len(members), tasks=len(tasks))
        assignments = {}
        for member in subscriptions:
            key = keys[member]
            user_data = Assignment(
                result.active[key],
                result.standby[key],
                result.warmup[key],
                active_hosts,
                standby_hosts,
                NO_PROBE,
            ).encode()
            owned = self._partitions(result.active[key], partitions)
            assignments[member] = ConsumerProtocolAssignment(self.version, owned, user_data)
        return assignments

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
            return Subscription.empty(process_id=member_id)


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
