"""The worker: its lifecycle state machine, the run from start to stop, and the one
place that runs a loop iteration (:meth:`Worker._iterate`) and beats the heart that
liveness and readiness are judged on (:meth:`Status.judged`, on the injected clock).

Every part is built by :func:`worker.runtime.assembly.assemble` on one ExitStack, so a
failure at any step releases what was started (see that module for the order).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from worker.assignment.model import Subscription
from worker.assignment.task_id import TaskId
from worker.clock import Clock, SystemClock
from worker.config import Settings
from worker.endpoint import is_wildcard
from worker.events import WORKER_STARTING, WORKER_STOPPED
from worker.kafka.broker_access import BROKER_ACCESS
from worker.kafka.member_states import Lost, MembershipEvent
from worker.laps import Laps
from worker.observability import Metrics, get_logger
from worker.processing.built_topology import BuiltTopology
from worker.runtime.assembly import Hooks, Outcome, Runtime, assemble
from worker.runtime.availability import AvailabilityTracker
from worker.runtime.broker_wait import StartupStopped
from worker.runtime.input_watch import LoopConditions
from worker.runtime.shutdown import ShutdownWatchdog
from worker.runtime.status import (
    REFRESH_SECONDS,
    Routing,
    Status,
    TaskStatus,
    WorkerState,
    advertised_endpoint,
    task_status,
    worker_lifecycle,
)
from worker.tasks.handover import awaiting_of
from worker.tasks.state import TaskRole

# How long a leaving worker waits for the new owners of its tasks to have written, and
# how often it looks.
LEAVE_LINGER_S = 3.0
LEAVE_CHECK_S = 0.05


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
        self._state_root = Path(state_dir or settings.state_dir)
        self._stop = threading.Event()
        self._log = get_logger(component="worker")
        self._fsm = worker_lifecycle(self._log, self.metrics)
        self._status = Status(heartbeat=self.clock.monotonic())
        self._routing = Routing()  # for queries: endpoint, host maps, tasks per sub-topology
        self._availability = AvailabilityTracker(self.metrics, self.clock)
        self._watchdog = ShutdownWatchdog(self._stop, settings.shutdown_timeout_ms / 1000.0)
        self._rt: Runtime | None = None  # what run() started; None before and after it
        self._assigned = False
        self._incoming: frozenset[TaskId] = frozenset()  # moved here, not active here yet
        self._saved_member_id: str | None = None
        self._broker_connected = True
        self._laps = Laps("loop.slow_iteration", self.clock.monotonic, component="loop")

    # -- control from other threads (signal handlers) --------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def status(self) -> Status:
        """The latest snapshot (any thread), its liveness judged now on the worker's clock:
        stalled (not ready) or not alive once the loop stopped coming round."""
        return self._status.judged(self.clock.monotonic())

    def _publish(self) -> None:
        tasks: tuple[TaskStatus, ...] = ()
        rt = self._rt
        if rt is not None:
            unavailable = self._availability.unavailable_seconds
            tasks = tuple(
                task_status(t, rt.reader.lag, unavailable(str(t.id)))
                for t in rt.parts.tasks.by_id.values()
            )
        now = self.clock.monotonic()
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
        self._watchdog.start()  # from a stop request on, exit within shutdown.timeout.ms
        outcome = Outcome()
        hooks = Hooks(self.status, self._subscription, self._publish)
        try:
            with ExitStack() as stack:
                try:
                    self._start_and_serve(stack, hooks, outcome)
                except Exception as exc:
                    self._fail(exc)  # seen while the stack releases what was started
                    raise
        finally:
            self._rt = None  # everything it held is closed now
            self._log.info(WORKER_STOPPED, clean=outcome.clean)
        self._set_state(WorkerState.NOT_RUNNING)
        return 0

    def _start_and_serve(self, stack: ExitStack, hooks: Hooks, outcome: Outcome) -> None:
        """Start, then serve; stopped while still waiting for the broker, a clean exit."""
        self._set_state(WorkerState.STARTING)
        try:
            rt = assemble(
                stack,
                self.settings,
                self.topology,
                self._state_root,
                self.metrics,
                self.clock,
                self._stop,
                hooks,
                outcome,
            )
            self._rt = rt
            self._serve(rt, outcome)
        except StartupStopped as exc:
            self._log.info("worker.start_abandoned", reason=str(exc))
            self._set_state(WorkerState.PENDING_SHUTDOWN)
            outcome.clean = True  # nothing was processed: every task closes as it opened

    def _fail(self, exc: Exception) -> None:
        """Enter ERROR: /healthz and /readyz answer 503 with it, and the ``worker_state``
        gauge shows it, while the stack releases what was started. The snapshot keeps its
        tasks: rebuilding them could fail the same way."""
        self._fsm.transition(WorkerState.ERROR, reason=type(exc).__name__)
        self._status = replace(self._status, state=WorkerState.ERROR)

    def _serve(self, rt: Runtime, outcome: Outcome) -> None:
        """Join, process until stopped, then the final commit (when the group allows it)."""
        settings = self.settings
        endpoint = advertised_endpoint(
            settings.application_server, settings.http_host, rt.http.port
        )
        if not settings.application_server and is_wildcard(settings.http_host):
            self._log.warning(
                "http.endpoint_guessed",
                http_host=settings.http_host,
                endpoint=endpoint,
                hint="set application.server to the host:port other instances reach this one at",
            )
        self._routing = Routing(endpoint).with_partitions(rt.layout.partitions)
        self._log.info(
            WORKER_STARTING,
            process_id=rt.state_dir.process_id,
            http_port=rt.http.port,
            endpoint=self._routing.endpoint,
            application_id=settings.application_id,
            memory_bound_bytes=settings.memory_bound_bytes,
        )
        if settings.initial_standbys_enabled:
            # Before the join: corrupt state is found now, and the first subscription
            # reports what is on disk (issue 4, seed 000).
            rt.parts.manager.open_initial_standbys(
                rt.state_dir.list_non_empty_task_ids(), rt.layout.partitions
            )
        stale = rt.state_dir.previous_member_id()
        rt.broker_wait.run("group", lambda: rt.member.start(stale_member_id=stale))
        self._set_state(WorkerState.REBALANCING)
        self._run_loop(rt)
        self._set_state(WorkerState.PENDING_SHUTDOWN)
        self._hand_over_before_leaving(rt)
        if rt.member.can_commit:
            rt.parts.committer.commit()
        else:
            # Stopped mid-rebalance: no generation to commit with. What was processed
            # since the last commit is dropped (the stores hold only committed data, so
            # the close is still clean) and is processed again by the next owner.
            rt.parts.committer.discard_uncommitted()
        outcome.clean = True

    def _run_loop(self, rt: Runtime) -> None:
        """Iterate until the stop event is set. The benchmarks' profiles count the
        processing thread's samples under this frame (``Worker._run_loop``)."""
        while not self._stop.is_set():
            self._iterate(rt)

    def _hand_over_before_leaving(self, rt: Runtime) -> None:
        """Graceful scale-in: keep processing while the group moves this worker's actives
        in one round, in which they are released to their new owners, then leave
        (:meth:`GroupMember.begin_leaving`). Bounded by half of ``shutdown.timeout.ms``,
        the rest is for closing. Where the group cannot do that, the worker leaves at
        once and its tasks move in the round its LeaveGroup starts."""
        if not rt.member.begin_leaving(rt.parts.manager.tasks_by_role(TaskRole.ACTIVE)):
            return
        deadline = self.clock.monotonic() + self.settings.shutdown_timeout_ms / 2000.0
        while not rt.member.departed and self.clock.monotonic() < deadline:
            self._iterate(rt)
        taken = rt.member.departed and self._await_take_over(rt, deadline)
        self._log.info(
            "worker.handed_over_before_leaving", departed=rt.member.departed, taken_over=taken
        )

    def _await_take_over(self, rt: Runtime, deadline: float) -> bool:
        """Wait, at most ``LEAVE_LINGER_S``, until the new owners of the released tasks have
        written, so that the LeaveGroup cannot cut their round short (:class:`TakeOverWatch`).
        Nothing is left to run. The member is polled: should the group start another round
        meanwhile, it joins it (a member that stops joining, above all a leader, would
        wedge the round on the test broker) and the wait ends; the close lets that join
        finish before it leaves. A second signal still exits at once."""
        watch = rt.parts.manager.take_over_watch()
        if watch is None:
            return False
        deadline = min(deadline, self.clock.monotonic() + LEAVE_LINGER_S)
        pause = threading.Event()  # never set: only paces the checks
        while not (taken := watch.taken_over()) and self.clock.monotonic() < deadline:
            if rt.member.poll() or rt.member.rebalancing:
                break  # nothing is this worker's any more: what the round brings is moot
            pause.wait(LEAVE_CHECK_S)
        return taken

    def _iterate(self, rt: Runtime) -> None:
        """One iteration of the processing thread, the only place one runs. In order:

        1. Apply what the group member reports (assignments, lost tasks); its poll never
           waits for a rebalance.
        2. The data work (:meth:`ProcessingLoop.step`): restore, consume and process,
           commit when due, probe warmups, clean the state directory.
        3. Follow the broker, charge unavailable time, check the topics.
        4. Move the worker's state with the group's and beat the heart.

        Raises fatal errors (the run then enters ERROR).
        """
        laps = self._laps
        laps.start()
        events = rt.member.poll()
        laps.lap("member_poll")
        if events:
            self._on_membership(rt, events)
            laps.lap("membership")
        now = rt.loop.step(laps)
        self._check_broker(rt)
        self._observe_availability(rt)
        rt.topic_watch.check(now)
        self._follow_group(rt, now)
        laps.lap("follow")
        laps.finish(member=rt.member.state.value)

    def _follow_group(self, rt: Runtime, now: float) -> None:
        """RUNNING once settled, REBALANCING while not; publish or just beat the heart
        (``now``, on the injected clock).

        Settled, as Kafka Streams' RUNNING: an assignment applied, its round over and none
        due (:attr:`GroupMember.settled`), every task the round moves here active here
        (taken over on its release, worker/tasks/handover.py, or given by the follow-up
        round) and restored. An empty assignment in a settled group is settled; one
        that is empty only until its old owners release what it moves here is not.
        """
        settled = (
            self._assigned
            and rt.member.settled
            and self._moves_arrived(rt)
            and not rt.parts.tasks.restoring()
        )
        if self._fsm.state is WorkerState.RUNNING and not settled:
            self._set_state(WorkerState.REBALANCING)
        elif (
            self._fsm.state is WorkerState.REBALANCING and settled and rt.parts.tasks.all_running()
        ):
            self._set_state(WorkerState.RUNNING)
        elif now - self._status.published >= REFRESH_SECONDS:
            self._publish()  # fresh offsets and lags for /tasks and interactive queries
        else:
            self._status = replace(self._status, heartbeat=now)

    def _moves_arrived(self, rt: Runtime) -> bool:
        """Whether every task the latest assignment moves to this instance (its
        ``pending_moves``) is active here; forgets those that are."""
        if self._incoming:
            self._incoming -= rt.parts.manager.tasks_by_role(TaskRole.ACTIVE)
        return not self._incoming

    def _observe_availability(self, rt: Runtime) -> None:
        """Charge the seconds active tasks sat on waiting input (issue 13, item 4)."""
        conditions = LoopConditions(
            rebalancing=rt.member.rebalancing,
            broker_connected=self._broker_connected,
            backpressure=rt.loop.backpressure,
            idling=frozenset(str(t) for t, g in rt.parts.tasks.groups.items() if g.waiting),
        )
        self._availability.observe(rt.inputs.samples(rt.parts.tasks.by_id.values(), conditions))

    def _check_broker(self, rt: Runtime) -> None:
        """Follow whether the group member reaches its coordinator; not ready while not.

        Once joined, losing the coordinator is how an unreachable broker shows first: an
        idle worker has no commit that could fail. Changes are logged and published. A
        broker that refused a client's credentials or ACLs (``BROKER_ACCESS``) raises
        BrokerAccessDenied: the run enters ERROR and the worker exits 2.
        """
        BROKER_ACCESS.check()
        if not self._assigned:
            return
        connected = rt.member.coordinator_known
        if connected is self._broker_connected:
            return
        self._broker_connected = connected
        if connected:
            self._log.info("broker.reachable")
        else:
            self._log.warning("broker.unreachable", bootstrap=self.settings.bootstrap_servers)
        self._publish()

    def _on_membership(self, rt: Runtime, events: Sequence[MembershipEvent]) -> None:
        """Apply what the group member reports, in order (on the processing thread)."""
        for event in events:
            if isinstance(event, Lost):
                self._log.warning("membership.lost", tasks=sorted(map(str, event.tasks)))
                rt.parts.manager.on_lost()
                continue
            assignment = event.assignment
            self._routing = self._routing.with_assignment(assignment)  # published by on_change
            me = rt.state_dir.process_id
            self._incoming = frozenset(
                t for t, owner in assignment.pending_moves.items() if owner == me
            )
            incoming = awaiting_of(assignment.pending_moves, assignment.standby, me)
            if rt.parts.manager.on_assigned(assignment, frozenset(incoming)):
                rt.member.handed_over()
            rt.loop.probes.on_assignment(assignment)
            self._assigned = True
            self._remember_member_id(rt)
        self._publish()  # /readyz and /tasks show the tasks the events moved at once

    def _remember_member_id(self, rt: Runtime) -> None:
        """Keep the member id in the state dir, so that a run after a crash can remove
        this member from the group instead of waiting for its session to time out."""
        member_id = rt.member.member_id
        if member_id and member_id != self._saved_member_id:
            rt.state_dir.save_member_id(member_id)
            self._saved_member_id = member_id

    def _subscription(self) -> Subscription:
        """What this instance tells the group leader at every join."""
        rt = self._rt
        assert rt is not None, "the member joins only while running"
        manager = rt.parts.manager
        # A task awaiting its old owner's release counts as this instance's own: the
        # leader leaves it here, and gives it outright should the release never come.
        incoming = manager.awaiting_release()
        return Subscription(
            process_id=rt.state_dir.process_id,
            endpoint=self._routing.endpoint,
            task_offset_sums=manager.offset_sums(),
            prev_active=manager.tasks_by_role(TaskRole.ACTIVE) | incoming,
            prev_standby=manager.tasks_by_role(
                TaskRole.STANDBY, TaskRole.WARMUP, TaskRole.INITIAL_STANDBY
            )
            - incoming,
        )
