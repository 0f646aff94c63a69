"""The composition root: builds every part, starts them in order, runs the loop, stops them.

Start order: state directory (process lock) -> HTTP -> topics -> Kafka clients -> task
manager -> group membership -> loop. Stop runs in reverse, each step in ``finally`` so
a failing step never leaves a lock or a group membership behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from worker.assignment.model import Subscription
from worker.clock import Clock, SystemClock
from worker.config import Settings
from worker.http.queries import QueryRouter
from worker.http.server import HttpServer
from worker.kafka.clients import (
    Admin,
    DataConsumer,
    RecordCollector,
    RestoreConsumer,
    WatermarkReader,
)
from worker.kafka.membership import GroupMember, Lost, MembershipEvent
from worker.kafka.topics import TopicWatch, prepare_topics
from worker.kafka.transactions import TransactionalCollector, group_metadata
from worker.observability import Metrics, get_logger
from worker.processing.topology import BuiltTopology
from worker.runtime.availability import AvailabilityTracker
from worker.runtime.input_watch import InputWatch, LoopConditions
from worker.runtime.loop import ProcessingLoop
from worker.runtime.probing import ProbeScheduler
from worker.runtime.shutdown import ShutdownWatchdog
from worker.runtime.status import (
    LOOP_STALL_SECONDS,
    REFRESH_SECONDS,
    LagFn,
    Routing,
    Status,
    TaskStatus,
    WorkerState,
    advertised_endpoint,
    no_lag,
    task_status,
    worker_lifecycle,
)
from worker.state.directory import StateDirectory
from worker.state.restore import ChangelogReader
from worker.state.rocksdb_env import RocksDBEnv
from worker.tasks.commit import CommitProtocol, ExactlyOnceCommit
from worker.tasks.manager import TaskManager
from worker.tasks.state import TaskRole
from worker.tasks.task import Task, TaskContext

# How often the running worker checks that its topics still exist as at start-up.
TOPIC_CHECK_SECONDS = 10.0


class Worker:
    """One worker process. ``run()`` blocks until stopped and returns the exit code."""

    def __init__(
        self,
        settings: Settings,
        topology: BuiltTopology,
        state_dir: Path | None = None,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.topology = topology
        self.metrics = metrics or Metrics()
        self.clock = clock or SystemClock()
        self._state_root = state_dir or settings.state_dir
        self._stop = threading.Event()
        self._log = get_logger(component="worker")
        self._fsm = worker_lifecycle(self._log, self.metrics)
        self._status = Status(heartbeat=time.monotonic())
        self.http: HttpServer | None = None
        self._manager: TaskManager | None = None
        self._assigned = False
        self._probes: ProbeScheduler | None = None
        self._routing = Routing()  # for queries: endpoint, host maps, tasks per sub-topology
        self._lag: LagFn = no_lag
        self._availability = AvailabilityTracker(self.metrics, self.clock)
        self._inputs: InputWatch | None = None
        self._loop: ProcessingLoop | None = None
        self._member: GroupMember | None = None
        self._state_dir: StateDirectory | None = None
        self._saved_member_id: str | None = None
        self._topic_watch: TopicWatch | None = None
        self._broker_connected = True
        self._watchdog = ShutdownWatchdog(self._stop, settings.shutdown_timeout_ms / 1000.0)

    # -- control from other threads (signal handlers) --------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def status(self) -> Status:
        """The latest snapshot (any thread); marked stalled if the loop stopped coming round."""
        status = self._status
        if time.monotonic() - status.heartbeat > LOOP_STALL_SECONDS and not status.stalled:
            return replace(status, stalled=True)
        return status

    def _publish(self) -> None:
        tasks: tuple[TaskStatus, ...] = ()
        if self._manager is not None:
            unavailable = self._availability.unavailable_seconds
            tasks = tuple(
                task_status(t, self._lag, unavailable(str(t.id)))
                for t in self._manager.tasks.values()
            )
        now = time.monotonic()
        self._status = Status(
            self._fsm.state,
            tasks,
            now,
            routing=self._routing,
            published=now,
            broker_connected=self._broker_connected,
        )

    def _set_state(self, state: WorkerState) -> None:
        self._fsm.transition(state)
        self._publish()

    # -- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        """Start everything, process until asked to stop, stop everything. Raises on fatal errors."""
        settings = self.settings
        state_dir = StateDirectory(Path(self._state_root), settings.application_id)
        self._watchdog.start()  # from a stop request on, exit within shutdown.timeout.ms
        state_dir.open()
        self._state_dir = state_dir
        try:
            self._set_state(WorkerState.STARTING)
            self.http = HttpServer(
                settings.http_host,
                settings.http_port,
                self.metrics,
                self.status,
                QueryRouter(self.topology, self.status),
            )
            self._routing = Routing(
                advertised_endpoint(settings.application_server, settings.http_host, self.http.port)
            )
            self.http.start()
            self._log.info(
                "worker.starting",
                process_id=state_dir.process_id,
                http_port=self.http.port,
                endpoint=self._routing.endpoint,
                application_id=settings.application_id,
                memory_bound_bytes=settings.memory_bound_bytes,
            )
            try:
                return self._run_with_clients(state_dir)
            finally:
                self.http.stop()
        finally:
            state_dir.close()

    def _run_with_clients(self, state_dir: StateDirectory) -> int:
        settings = self.settings
        admin = Admin(settings)
        layout = prepare_topics(
            admin,
            self.topology,
            settings.application_id,
            settings.internal_topics_create,
            dead_letter=settings.dead_letter_enabled,
        )
        self._routing = self._routing.with_partitions(layout.partitions)
        self._topic_watch = TopicWatch(
            admin,
            self.topology,
            settings.application_id,
            layout,
            settings.dead_letter_enabled,
            TOPIC_CHECK_SECONDS,
            checked_at=time.monotonic(),
        )
        collector = (
            TransactionalCollector(
                settings, f"{settings.application_id}-{state_dir.process_id}", self.metrics
            )
            if settings.exactly_once
            else RecordCollector(settings)
        )
        consumer = DataConsumer(settings)
        watermarks = WatermarkReader(settings)
        restore_consumer = RestoreConsumer(settings)
        env = RocksDBEnv(settings.rocksdb_memory_bytes)
        self.metrics.rocksdb_cache_bytes.set_function(env.cache_usage_bytes)
        self.metrics.rocksdb_memtable_bytes.set_function(env.write_buffer_usage_bytes)
        ctx = TaskContext(settings, state_dir, env, collector, self.metrics, self.clock)
        reader: ChangelogReader[Task] = ChangelogReader(
            restore_consumer, self.metrics, settings.restore_batch_records, self.clock
        )
        self._lag = reader.lag
        member = GroupMember(
            settings,
            self.topology.source_topics_by_subtopology(),
            lambda: self._subscription(state_dir),
            self.metrics,
            changelog_topics=self.topology.changelog_topics_by_subtopology(settings.application_id),
            end_offsets=admin.end_offsets,
            clock=self.clock,
        )
        manager = TaskManager(
            self.topology,
            ctx,
            reader,
            consumer,
            member,
            high_watermarks=watermarks.read,
            commit_protocol=self._commit_protocol(collector, member),
        )
        manager.on_change = self._publish
        self._manager = manager
        self._member = member
        loop = ProcessingLoop(
            settings,
            manager,
            member,
            consumer,
            collector,
            self.clock,
            self._stop,
            self.metrics,
            on_membership=self._on_membership,
        )
        loop.on_iteration = self._on_iteration
        self._probes = loop.probes
        self._loop = loop
        self._inputs = InputWatch(consumer.high_watermark, admin.request_end_offsets, self.clock)
        clean = False
        try:
            if settings.initial_standbys_enabled:
                # Before the join: corrupt state is found now, and the first subscription
                # reports what is on disk (issue 4, seed 000).
                manager.open_initial_standbys(
                    state_dir.list_non_empty_task_ids(), layout.partitions
                )
            member.start(stale_member_id=state_dir.previous_member_id())
            self._set_state(WorkerState.REBALANCING)
            loop.run()
            self._set_state(WorkerState.PENDING_SHUTDOWN)
            if member.can_commit:
                manager.commit()
            else:
                # Stopped mid-rebalance: no generation to commit with. What was processed
                # since the last commit is dropped (the stores hold only committed data, so
                # the close below is still clean) and is processed again by the next owner.
                manager.discard_uncommitted()
            clean = True
        finally:
            self._shutdown(
                manager, member, (consumer, restore_consumer, watermarks), collector, clean
            )
        self._set_state(WorkerState.NOT_RUNNING)
        return 0

    def _commit_protocol(
        self, collector: RecordCollector, member: GroupMember
    ) -> CommitProtocol | None:
        """exactly_once_v2: transactions fenced by the member's generation; else the default."""
        if not isinstance(collector, TransactionalCollector):
            return None
        settings = self.settings
        return ExactlyOnceCommit(
            collector,
            lambda: group_metadata(
                settings.application_id,
                member.generation,
                member.member_id,
                settings.group_instance_id,
            ),
        )

    def _shutdown(
        self,
        manager: TaskManager,
        member: GroupMember,
        consumers: tuple[DataConsumer, RestoreConsumer, WatermarkReader],
        collector: RecordCollector,
        clean: bool,
    ) -> None:
        try:
            manager.close_all(clean=clean)
        finally:
            try:
                member.close(leave=True)
                if self._state_dir is not None:
                    self._state_dir.save_member_id(None)
            finally:
                collector.close()
                for consumer in consumers:
                    consumer.close()
                self._log.info("worker.stopped", clean=clean)

    def _on_iteration(self) -> None:
        manager = self._manager
        if manager is None:
            return
        self._check_broker()
        self._observe_availability(manager)
        if self._topic_watch is not None:
            self._topic_watch.check(time.monotonic())
        settled = self._assigned and not manager.restoring()
        if settled and self._member is not None and self._member.rebalancing:
            settled = False
        if self._fsm.state is WorkerState.RUNNING and not settled:
            self._set_state(WorkerState.REBALANCING)
        elif self._fsm.state is WorkerState.REBALANCING and settled and manager.all_running():
            self._set_state(WorkerState.RUNNING)
        elif time.monotonic() - self._status.published >= REFRESH_SECONDS:
            self._publish()  # fresh offsets and lags for /tasks and interactive queries
        else:
            self._status = replace(self._status, heartbeat=time.monotonic())

    def _observe_availability(self, manager: TaskManager) -> None:
        """Charge the seconds active tasks sat on waiting input (issue 13, item 4)."""
        if self._inputs is None or self._loop is None or self._member is None:
            return
        conditions = LoopConditions(
            rebalancing=self._member.rebalancing,
            broker_connected=self._broker_connected,
            backpressure=self._loop.backpressure,
        )
        self._availability.observe(self._inputs.samples(manager.tasks.values(), conditions))

    def _check_broker(self) -> None:
        """Follow whether the group member reaches its coordinator; not ready while not.

        Once joined, losing the coordinator is how an unreachable broker shows first: an
        idle worker has no commit that could fail. Changes are logged and published.
        """
        member = self._member
        if member is None or not self._assigned:
            return
        connected = member.coordinator_known
        if connected is self._broker_connected:
            return
        self._broker_connected = connected
        if connected:
            self._log.info("broker.reachable")
        else:
            self._log.warning("broker.unreachable", bootstrap=self.settings.bootstrap_servers)
        self._publish()

    def _on_membership(self, events: Sequence[MembershipEvent]) -> None:
        """Apply what the group member reports, in order (on the processing thread)."""
        assert self._manager is not None
        for event in events:
            if isinstance(event, Lost):
                self._log.warning("membership.lost", tasks=sorted(map(str, event.tasks)))
                self._manager.on_lost()
                continue
            assignment = event.assignment
            self._routing = self._routing.with_assignment(assignment)  # published by on_change
            self._manager.on_assigned(assignment)
            if self._probes is not None:
                self._probes.on_assignment(assignment)
            self._assigned = True
            self._remember_member_id()

    def _remember_member_id(self) -> None:
        """Keep the member id in the state dir, so that a run after a crash can remove
        this member from the group instead of waiting for its session to time out."""
        member_id = self._member.member_id if self._member is not None else ""
        if member_id and member_id != self._saved_member_id and self._state_dir is not None:
            self._state_dir.save_member_id(member_id)
            self._saved_member_id = member_id

    def _subscription(self, state_dir: StateDirectory) -> Subscription:
        manager = self._manager
        if manager is None:
            return Subscription(
                state_dir.process_id, self._routing.endpoint, {}, frozenset(), frozenset()
            )
        return Subscription(
            process_id=state_dir.process_id,
            endpoint=self._routing.endpoint,
            task_offset_sums=manager.offset_sums(),
            prev_active=manager.tasks_by_role(TaskRole.ACTIVE),
            prev_standby=manager.tasks_by_role(
                TaskRole.STANDBY, TaskRole.WARMUP, TaskRole.INITIAL_STANDBY
            ),
        )
