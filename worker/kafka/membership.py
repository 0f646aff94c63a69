"""The group member: kafka-python joins the group and runs our task assignor; it never fetches.

confluent-kafka cannot run a custom assignor (platform-facts.md), so membership and task
assignment use a kafka-python ``KafkaConsumer`` with :class:`TaskAssignor`, while all data
flows through confluent-kafka elsewhere. Offset commits go through this member so the
broker fences them with the group generation.

Threading. kafka-python 3 runs every group callback (assignor, rebalance listener) on its
own IO thread, and a callback there must not block on the consumer (``commit()`` would
raise). So the assignor only records what arrives, and :meth:`GroupMember.poll` hands it
to the :class:`RebalanceListener` on the caller's thread. ``poll`` drives the coordinator
directly instead of ``KafkaConsumer.poll``: a rejoin can then only start inside ``poll``,
right after ``on_revoked`` has run, never behind the runtime's back (with
``KafkaConsumer.poll`` the IO thread could start the JoinGroup before the runtime
committed). The private ``_coordinator`` handle is used for that and for batched offset
fetches; kafka-python is pinned to 3.x in pyproject.toml.

Asking for a rebalance (:meth:`GroupMember.request_rebalance`, KIP-441's probing
rebalance). Kafka Streams calls ``enforceRebalance``; kafka-python has no public
equivalent, and its ``request_rejoin`` is not enough here: on the test broker a rejoin
without a membership change is answered with the previous assignment and generation
(platform-facts.md), so the leader never plans again. The member therefore leaves and
joins again (``unsubscribe()`` then ``subscribe()``, a new member id), a membership
change that every broker answers with a full rebalance. Under the eager protocol this
costs nothing extra: every member revokes all its tasks on any rebalance anyway. (A
static member, ``group.instance.id``, sends no LeaveGroup; Kafka rebalances on its
rejoin because its subscription user data changed.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import kafka.errors as kerrors
from kafka import KafkaConsumer
from kafka.protocol.consumer import LeaveGroupRequest
from kafka.structs import OffsetAndMetadata, TopicPartition

from worker.assignment import planner
from worker.assignment.model import Assignment, Subscription
from worker.clock import Clock
from worker.config import Settings
from worker.errors import FatalError, KafkaUnavailable, TaskMigrated, WorkerError
from worker.kafka.task_assignor import EndOffsets, TaskAssignor
from worker.observability import Metrics, get_logger

TP = tuple[str, int]

# librdkafka pass-through keys kafka-python understands, and what it calls them.
_PASSTHROUGH = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}
_UPPERCASE = {"security_protocol", "sasl_mechanism"}
_MIGRATED = (
    kerrors.CommitFailedError,
    kerrors.RebalanceInProgressError,
    kerrors.IllegalGenerationError,
    kerrors.UnknownMemberIdError,
    kerrors.FencedInstanceIdError,
)


class RebalanceListener(Protocol):
    """The runtime's side of a rebalance. Both calls come on the thread calling ``poll``."""

    def on_revoked(self) -> None:
        """Eager protocol: everything is being taken away; commit and suspend all tasks.

        Called before this member rejoins. A commit made here is still fenced by the old
        generation; if the member was already thrown out, it raises TaskMigrated.
        """

    def on_assigned(self, assignment: Assignment) -> None:
        """The new assignment, with ``generation`` filled in."""


def kafka_python_config(settings: Settings) -> dict[str, Any]:
    """Consumer settings for the group member, from our settings and the pass-through.

    Only the security and identity keys of the librdkafka pass-through apply here (it is
    a different client); the rest are ignored and their names logged, never their values.
    """
    config: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in settings.bootstrap_servers.split(",")],
        "client_id": f"{settings.application_id}-membership",
        "group_id": settings.application_id,
        "group_instance_id": settings.group_instance_id or None,
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
        "max_poll_interval_ms": settings.max_poll_interval_ms,
        "enable_auto_commit": False,
        "allow_auto_create_topics": False,
        "metrics_enabled": False,
        # kafka-python backs off reconnects up to 30 s by default: after an outage the
        # member would find the coordinator up to 30 s after the broker came back (seen).
        "reconnect_backoff_max_ms": 2000,
    }
    ignored = []
    for key, value in settings.kafka_passthrough().items():
        name = _PASSTHROUGH.get(key)
        if name is None and key == "ssl.endpoint.identification.algorithm":
            config["ssl_check_hostname"] = value.lower() == "https"
        elif name is None:
            ignored.append(key)
        else:
            config[name] = value.upper() if name in _UPPERCASE else value
    if ignored:
        get_logger(component="membership").info(
            "membership.config_ignored", keys=sorted(ignored), reason="not used by kafka-python"
        )
    return config


def planner_config(settings: Settings) -> planner.PlannerConfig:
    """The leader's KIP-441 knobs from our settings."""
    return planner.PlannerConfig(
        num_standby_replicas=settings.num_standby_replicas,
        max_warmup_replicas=settings.max_warmup_replicas,
        acceptable_recovery_lag=settings.acceptable_recovery_lag,
        probing_rebalance_interval_ms=settings.probing_rebalance_interval_ms,
    )


def translate(exc: Exception) -> WorkerError:
    """Classify a kafka-python error by what the caller must do (the one place this happens)."""
    if isinstance(exc, _MIGRATED):
        return TaskMigrated(f"group membership moved on: {exc!r}")
    if isinstance(exc, kerrors.RetriableError | kerrors.KafkaConnectionError):
        return KafkaUnavailable(f"group coordinator unavailable: {exc!r}")
    return FatalError(f"group membership failed: {exc!r}")


class GroupMember:
    """This process's membership of the application's group (group id = ``application.id``).

    Lifecycle: ``start()`` once, then ``poll()`` on every loop iteration from ONE thread
    (the listener is called on it), ``commit()``/``committed()`` from that same thread,
    ``close()`` at the end (idempotent). Not thread-safe.
    """

    def __init__(
        self,
        settings: Settings,
        source_topics: Mapping[int, Sequence[str]],
        subscription: Callable[[], Subscription],
        listener: RebalanceListener,
        metrics: Metrics,
        changelog_topics: Mapping[int, Sequence[str]] | None = None,
        end_offsets: EndOffsets | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``changelog_topics`` (subtopology -> its stores' changelog topics) and
        ``end_offsets`` (log-end offset per partition; may raise or answer partially) feed
        the leader's lag computation; ``clock`` gives the leader's wall clock for the
        probing time. See :class:`TaskAssignor`."""
        self._settings = settings
        self._topics = sorted({t for topics in source_topics.values() for t in topics})
        self._subscription = subscription
        self._listener = listener
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
        self._holding = False  # the listener holds an assignment it has not given back
        self._joining = False  # on_revoked ran and the subscription is sent; join under way
        self._closed = False
        # Why a rebalance was asked for; cleared once a subscription snapshot taken after
        # the request has been sent (that rebalance carries what the request was about).
        self._rebalance_reason: str | None = None
        # The broker's rebalance timeout is max.poll.interval.ms; a join never takes longer.
        self._join_timeout_ms = settings.max_poll_interval_ms + settings.session_timeout_ms

    def start(self, stale_member_id: str | None = None) -> None:
        """Connect and subscribe with our assignor (eager); the join happens in ``poll``.

        ``stale_member_id``: the member id of this process's previous run, which was
        killed and so is still in the group until its session times out. Until then the
        broker waits for it to rejoin (Kafka) or gives it tasks nobody processes (the test
        broker); removing it first lets the join finish at once. Only dynamic members do
        this: Kafka replaces a static member (``group.instance.id``) by itself.

        Raises KafkaUnavailable when no broker answers within the bootstrap timeout.
        """
        if self._consumer is not None or self._closed:
            return
        try:
            consumer = KafkaConsumer(
                **kafka_python_config(self._settings),
                partition_assignment_strategy=[self._assignor],
            )
        except kerrors.KafkaError as exc:
            raise translate(exc) from exc
        if stale_member_id and not self._settings.group_instance_id:
            self._remove_stale_member(consumer, stale_member_id)
        consumer.subscribe(topics=self._topics)
        self._consumer = consumer
        self._log.info("membership.started", topics=self._topics)

    def _remove_stale_member(self, consumer: KafkaConsumer, member_id: str) -> None:
        """Send LeaveGroup on behalf of our previous run's member. Best effort: on any
        failure the join only takes longer (the session timeout), so it is logged only."""
        coordinator = consumer._coordinator
        timeout_ms = self._settings.session_timeout_ms
        request = LeaveGroupRequest(
            group_id=self._settings.application_id,
            member_id=member_id,
            members=[
                LeaveGroupRequest.MemberIdentity(
                    member_id=member_id, group_instance_id=None, reason="previous run killed"
                )
            ],
        )

        async def leave() -> Any:
            future = coordinator._manager.send(request, node_id=coordinator.coordinator_id)
            return await coordinator._manager.wait_for(future, timeout_ms)

        try:
            if not coordinator.ensure_coordinator_ready(timeout_ms=timeout_ms):
                raise kerrors.CoordinatorNotAvailableError("no coordinator")
            response = coordinator._net.run(leave)
            codes = [response.error_code, *(m.error_code for m in response.members)]
            error = next((kerrors.for_code(c).__name__ for c in codes if c), None)
        except Exception as exc:  # best effort, see the docstring
            error = repr(exc)
        self._log.info("membership.stale_member_removed", member_id=member_id, error=error)

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
        """Whether this member planned the current generation (kafka-python tracks it)."""
        return self._consumer is not None and bool(self._consumer._coordinator._is_leader)

    @property
    def coordinator_known(self) -> bool:
        """Whether the member knows its group coordinator and is connected to it.

        False from the moment the heartbeat finds the connection gone, or a whole session
        timeout passes without a heartbeat answered while the group is stable, until the
        coordinator answers again: the broker is unreachable, for readiness. The second
        case is checked here rather than left to kafka-python's heartbeat thread, which
        waits on the unanswered heartbeat itself when packets are dropped and so never
        gets to its own session check.
        """
        if self._consumer is None:
            return False
        coordinator = self._consumer._coordinator
        if coordinator.coordinator_unknown():
            return False
        return not (coordinator.stable() and coordinator.heartbeat.session_timeout_expired())

    @property
    def assigned_partitions(self) -> frozenset[TP]:
        """What the group gave this member: exactly the source partitions of its actives."""
        if self._consumer is None:
            return frozenset()
        return frozenset((tp.topic, tp.partition) for tp in self._consumer.assignment())

    def poll(self, timeout_ms: int) -> None:
        """Keep the membership alive and carry out rebalances. Never returns records.

        Returns at once while the group is stable. While joining it blocks until the
        join completes (at most the rebalance timeout, ``max.poll.interval.ms``), even
        when ``timeout_ms`` is shorter: kafka-python 3.0 discards a JoinGroup result
        that arrives while nobody is inside ``poll`` and starts the join over, so a
        loop that polls with short timeouts may never finish a rebalance. Blocking
        costs nothing here: under the eager protocol every task is suspended until the
        new assignment arrives. The rebalance protocol, in order:

        1. A rejoin is needed (a member came or went, we were thrown out, metadata
           changed, or :meth:`request_rebalance` asked for one): if the listener holds
           an assignment, ``on_revoked()``. For a requested one, then leave the group
           and subscribe again (module doc).
        2. Snapshot ``subscription()`` for the JoinGroup user data.
        3. Join and sync (over as many ``poll`` calls as it takes).
        4. Pause every assigned partition, then ``on_assigned(assignment)``.

        Raises TaskMigrated/KafkaUnavailable/FatalError (see :func:`translate`),
        UnsupportedVersion when the leader sent a format this worker cannot read, and
        whatever the listener raises.
        """
        consumer = self._require()
        coordinator = consumer._coordinator
        try:
            if self._rebalance_reason is not None and not (
                self._joining or coordinator.need_rejoin()
            ):
                self._leave_and_rejoin(consumer)
            if coordinator.need_rejoin():
                self._prepare_join()
                coordinator.poll(timeout_ms=max(timeout_ms, self._join_timeout_ms))
            else:
                coordinator.poll_heartbeat()
        except kerrors.KafkaError as exc:
            raise translate(exc) from exc
        assignment = self._assignor.take()
        if assignment is not None:
            self._deliver(consumer, assignment)

    def request_rebalance(self, reason: str) -> None:
        """Ask the whole group to rebalance, carried out at the next :meth:`poll`.

        For KIP-441 probing: a warmup caught up, or the probing time came. ``poll`` then
        revokes (``on_revoked``), leaves the group and joins again with a fresh
        subscription snapshot, which every broker answers with a full rebalance (module
        doc). Idempotent until then (the latest reason is logged). A rebalance that starts
        anyway before that takes its snapshot after the request and so satisfies it; a
        request made while a join is under way waits for that join to finish. Ignored once
        closed. Counts ``worker_probing_rebalances_total`` when carried out.
        """
        if self._closed:
            return
        self._rebalance_reason = reason
        self._log.info("membership.rebalance_requested", reason=reason)

    def commit(self, offsets: Mapping[TP, int], timeout_ms: int | None = None) -> None:
        """Synchronously commit next-offsets-to-consume, fenced by the current generation.

        Raises TaskMigrated when the group moved on (rebalance under way, generation or
        member unknown) and KafkaUnavailable on timeouts or no coordinator.
        """
        if not offsets:
            return
        consumer = self._require()
        request = {
            TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()
        }
        try:
            consumer.commit(request, timeout_ms=timeout_ms)
        except kerrors.KafkaError as exc:
            raise translate(exc) from exc

    def committed(
        self, partitions: Iterable[TP], timeout_ms: int | None = None
    ) -> dict[TP, int | None]:
        """The group's committed offsets (None where nothing was committed), in one request.

        Waits at most ``timeout_ms`` (default: the request timeout), then raises
        KafkaUnavailable; kafka-python alone would retry forever without a timeout.
        """
        wanted = [TopicPartition(t, p) for t, p in partitions]
        if not wanted:
            return {}
        consumer = self._require()
        if timeout_ms is None:
            timeout_ms = int(consumer.config["request_timeout_ms"])
        try:
            found = consumer._coordinator.fetch_committed_offsets(wanted, timeout_ms=timeout_ms)
        except kerrors.KafkaError as exc:
            raise translate(exc) from exc
        result: dict[TP, int | None] = {}
        for tp in wanted:
            meta = found.get(tp)
            result[(tp.topic, tp.partition)] = meta.offset if meta and meta.offset >= 0 else None
        return result

    def close(self, leave: bool = True) -> None:
        """Stop the member; with ``leave`` send LeaveGroup so the rest rebalance at once.

        Without ``leave`` the group notices only when the session times out (what a crash
        looks like). The listener is not called: the runtime shuts its tasks down itself.
        Idempotent; errors while closing are logged, not raised.
        """
        consumer, self._consumer = self._consumer, None
        self._closed = True
        if consumer is None:
            return
        try:
            if leave:
                consumer.close(autocommit=False, timeout_ms=self._settings.session_timeout_ms)
            else:
                _close_without_leaving(consumer)
        except Exception as exc:  # closing must not mask the caller's error
            self._log.warning("membership.close_failed", error=repr(exc))
        self._log.info("membership.closed", left=leave)

    def _prepare_join(self) -> None:
        """Steps 1 and 2 of the protocol, once per rebalance."""
        if self._joining:
            return
        self._revoke()
        self._assignor.set_subscription(self._subscription())
        self._rebalance_reason = None  # this join carries everything the request was about
        self._joining = True
        self._log.info("membership.joining")

    def _revoke(self) -> None:
        """Step 1: give the assignment back while still in the old generation (eager)."""
        if self._holding:
            self._holding = False
            self._log.info("membership.revoking", generation=self.generation)
            self._listener.on_revoked()

    def _leave_and_rejoin(self, consumer: KafkaConsumer) -> None:
        """A requested rebalance: revoke, leave, subscribe again (module doc).

        Revoking comes first so the listener still commits in the old generation. The
        request stays pending until ``_prepare_join`` takes the new snapshot, so a failure
        here is retried at the next ``poll``.
        """
        reason = self._rebalance_reason
        self._revoke()
        self._log.info("membership.leaving_to_rebalance", reason=reason, member_id=self.member_id)
        consumer.unsubscribe()
        consumer.subscribe(topics=self._topics)
        self._metrics.probing_rebalances.inc()

    def _deliver(self, consumer: KafkaConsumer, assignment: Assignment) -> None:
        """Step 4: make sure nothing is ever fetched, then hand the assignment over."""
        consumer.pause(*consumer.assignment())
        self._joining = False
        self._holding = True
        self._metrics.rebalances.inc()
        self._log.info(
            "membership.assigned",
            generation=assignment.generation,
            active=sorted(map(str, assignment.active)),
            standby=len(assignment.standby),
            warmup=len(assignment.warmup),
        )
        self._listener.on_assigned(assignment)

    def _group_metadata(self) -> tuple[int, str]:
        if self._consumer is None:
            return -1, ""
        meta = self._consumer.group_metadata()
        return int(meta.generation_id), str(meta.member_id or "")

    def _require(self) -> KafkaConsumer:
        if self._consumer is None:
            state = "closed" if self._closed else "not started"
            raise FatalError(f"group member is {state}")
        return self._consumer


def _close_without_leaving(consumer: KafkaConsumer) -> None:
    """Release sockets and the IO thread but send no LeaveGroup (kafka-python has no flag)."""
    consumer._coordinator._close_heartbeat()
    consumer._closed = True
    consumer._client.close()
