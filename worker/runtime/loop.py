"""The processing loop: poll the group -> restore a batch -> consume -> process -> maybe commit.

Each iteration does bounded work, so heartbeats, rebalances and commits keep their pace
while tasks restore. The stop event is checked every iteration; an idle loop waits in the
group member's poll, never in a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from worker.clock import Clock
from worker.config import Settings
from worker.errors import TaskMigrated
from worker.kafka.clients import DataConsumer, RecordCollector
from worker.kafka.membership import GroupMember
from worker.observability import Metrics, get_logger
from worker.runtime.probing import ProbeScheduler
from worker.tasks.manager import TaskManager

CONSUME_BATCH = 2000


class ProcessingLoop:
    def __init__(
        self,
        settings: Settings,
        manager: TaskManager,
        member: GroupMember,
        consumer: DataConsumer,
        collector: RecordCollector,
        clock: Clock,
        stop: threading.Event,
        metrics: Metrics,
    ) -> None:
        self._settings = settings
        self._manager = manager
        self._member = member
        self._consumer = consumer
        self._collector = collector
        self._clock = clock
        self._stop = stop
        self._metrics = metrics
        self._log = get_logger(component="loop")
        self._commit_interval = settings.commit_interval_ms / 1000.0
        self._max_uncommitted = settings.statestore_uncommitted_max_bytes
        # The cleaner looks for expired directories a few times per delay, at most once
        # a minute and at least once a second.
        self._clean_interval = min(60.0, max(1.0, settings.state_cleanup_delay_ms / 4000.0))
        self.on_iteration: Callable[[], None] = lambda: None
        self.probes = ProbeScheduler(settings.acceptable_recovery_lag, clock, metrics)

    def run(self) -> None:
        """Iterate until the stop event is set. Raises fatal errors to the worker."""
        last_commit = self._clock.monotonic()
        next_clean = last_commit + self._clean_interval
        poll_s = self._settings.poll_ms / 1000.0
        while not self._stop.is_set():
            manager = self._manager
            reading = manager.reading_changelogs()
            busy = reading or bool(self._consumer.assigned)
            self._member.poll(timeout_ms=0 if busy else self._settings.poll_ms)
            if reading:
                manager.restore_step(timeout=0.0 if self._consumer.assigned else poll_s)
            messages = self._consumer.consume(CONSUME_BATCH, 0.0 if manager.restoring() else poll_s)
            if messages:
                manager.process(messages)
            self._collector.poll()
            now = self._clock.monotonic()
            if now - last_commit >= self._commit_interval or self._over_memory_bound():
                self._commit()
                last_commit = now
            self.probes.check(manager, self._member)
            if now >= next_clean:
                manager.clean_state_dir()
                next_clean = now + self._clean_interval
            self.on_iteration()

    def _over_memory_bound(self) -> bool:
        pending = self._manager.pending_bytes()
        self._metrics.uncommitted_bytes.set(pending)
        return self._max_uncommitted >= 0 and pending > self._max_uncommitted

    def _commit(self) -> None:
        try:
            self._manager.commit()
        except TaskMigrated as exc:
            # Another member owns our tasks now: our uncommitted work is void. Close the
            # tasks dirty; the rebalance the member is already in gives them back or not.
            self._log.warning("commit.migrated", error=str(exc))
            self._manager.drop_all_dirty()
