"""The data work of one loop iteration: update the global tables -> restore a batch ->
consume -> process -> punctuate -> commit -> heal what was found corrupted.

The worker runs the iteration (:meth:`worker.runtime.worker.Worker._iterate`): it applies
the group member's messages, calls :meth:`ProcessingLoop.step` for the data work, then
follows the group and beats the heart. Each step does bounded work and never waits for
the group: a rebalance runs on the group member's own IO thread and reaches the worker
as messages, applied between two steps. Records keep flowing while the group
rebalances; only commits wait for it, since they need a settled generation. A deferred
commit lets the store buffers grow, up to ``statestore.uncommitted.max.bytes``; beyond
that the loop stops fetching (backpressure) until the commit can run, and drops nothing.
An idle step waits on the stop event or in a fetch, never in a sleep.
"""

from __future__ import annotations

import threading

from worker.clock import Clock
from worker.config import Settings
from worker.errors import TaskMigrated
from worker.kafka.collector import RecordCollector
from worker.kafka.consumers import DataConsumer
from worker.kafka.membership import GroupMember
from worker.laps import Laps
from worker.observability import Metrics, get_logger
from worker.runtime.global_tables import GlobalTables
from worker.runtime.probing import ProbeScheduler
from worker.state.disk_space import DiskSpaceWatch
from worker.tasks.parts import TaskParts

CONSUME_BATCH = 2000


class ProcessingLoop:
    """The data side of the processing thread; one :meth:`step` per iteration. Not thread-safe."""

    def __init__(
        self,
        settings: Settings,
        parts: TaskParts,
        member: GroupMember,
        consumer: DataConsumer,
        collector: RecordCollector,
        clock: Clock,
        stop: threading.Event,
        metrics: Metrics,
        disk: DiskSpaceWatch | None = None,
        global_tables: GlobalTables | None = None,
    ) -> None:
        self._settings = settings
        self._disk = disk
        self._parts = parts
        self._member = member
        self._consumer = consumer
        self._collector = collector
        self._clock = clock
        self._stop = stop
        self._metrics = metrics
        self._globals = global_tables
        self._log = get_logger(component="loop")
        self._commit_interval = settings.commit_interval_ms / 1000.0
        self._max_uncommitted = settings.statestore_uncommitted_max_bytes
        # The cleaner looks for expired directories a few times per delay, at most once
        # a minute and at least once a second.
        self._clean_interval = min(60.0, max(1.0, settings.state_cleanup_delay_ms / 4000.0))
        self.probes = ProbeScheduler(settings.acceptable_recovery_lag, clock, metrics)
        self.backpressure = False  # fetching stopped: buffers full, commit waiting on the group
        self._deferred = False  # a due commit waits for the rebalance to end
        self._poll_s = settings.poll_ms / 1000.0
        self._last_commit = clock.monotonic()
        self._next_clean = self._last_commit + self._clean_interval

    def step(self, laps: Laps) -> float:
        """One iteration's data work; returns the clock reading it judged commits on.
        Its parts are timed on ``laps`` (the iteration's, see worker/laps.py).

        Raises fatal errors to the worker.
        """
        tasks = self._parts.tasks
        poll_s = self._poll_s
        if self._globals is not None:
            self._globals.update()  # between batches: lookups see the tables' latest
            laps.lap("global_tables")
        reading = tasks.reading_changelogs()
        consuming = bool(self._consumer.assigned) and not self.backpressure
        if reading:
            tasks.restore_step(timeout=0.0 if consuming else poll_s)
            self._parts.manager.check_releases(self._member.generation)
            laps.lap("restore")
        if consuming:
            messages = self._consumer.consume(CONSUME_BATCH, 0.0 if tasks.restoring() else poll_s)
            laps.lap("consume")
            # Also without records: a task reading several partitions may have waited
            # for one of them, which a fetch's end or the idle time since ended.
            self._parts.router.process(messages)
            laps.lap("process")
        elif not reading:
            self._stop.wait(poll_s)  # nothing to read: wait for the group or a stop
            laps.lap("idle")
        self._parts.router.punctuate()  # also without records: wall-clock punctuators
        self._collector.poll()
        laps.lap("punctuate")
        now = self._clock.monotonic()
        over = self._over_memory_bound()
        due = now - self._last_commit >= self._commit_interval or over
        if due and self._try_commit(over):
            self._last_commit = now
        laps.lap("commit")
        self._parts.healer.heal_reported()  # corruption a read, write or query met
        self.probes.check(tasks, self._member)
        if now >= self._next_clean:
            self._parts.manager.clean_state_dir()
            self._next_clean = now + self._clean_interval
        if self._disk is not None:
            self._disk.check(now)  # measures every 10 s
        laps.lap("upkeep")
        return now

    def _over_memory_bound(self) -> bool:
        pending = self._parts.tasks.pending_bytes()
        self._metrics.uncommitted_bytes.set(pending)
        return self._max_uncommitted >= 0 and pending > self._max_uncommitted

    def _try_commit(self, over_bound: bool) -> bool:
        """Commit if the group allows it now; else defer (and stop fetching when full).

        Returns True when the commit ran (successfully or not: a failed commit revives
        the tasks, and retrying at once would not help).
        """
        if not self._member.can_commit:
            if not self._deferred:
                self._deferred = True
                self._log.info("commit.deferred", member=self._member.state.value)
            self._set_backpressure(over_bound)
            return False
        self._deferred = False
        self._set_backpressure(False)
        try:
            self._parts.committer.commit()
        except TaskMigrated as exc:
            # The group went on without us: our actives' uncommitted work is void. The
            # member notices too and joins again; the next assignment starts over.
            self._log.warning("commit.migrated", error=str(exc))
            self._parts.manager.on_lost()
        return True

    def _set_backpressure(self, on: bool) -> None:
        if on is self.backpressure:
            return
        self.backpressure = on
        self._log.info(
            "loop.backpressure" if on else "loop.backpressure_released",
            pending_bytes=self._parts.tasks.pending_bytes(),
        )
