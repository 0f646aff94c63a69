"""The changelog reader: brings active tasks' stores up to the end of their changelogs.

Restore reads from each store's stored offset + 1 to the end of the changelog in large
batches; each batch is written to RocksDB together with its last offset, so a crash
during restore resumes where it stopped. "The end" is the high watermark carried by the
fetch path (the partition-EOF event), never ListOffsets alone (platform-facts: the test
broker's ListOffsets is wrong for multi-record batches).

The processing loop drives it with ``step()``; each call does a bounded amount of work so
group heartbeats and commits of running tasks continue while other tasks restore.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from worker.kafka.clients import RestoreConsumer
from worker.observability import Metrics, get_logger
from worker.state.store import Store
from worker.tasks.task import Task

TP = tuple[str, int]


@dataclass
class _Changelog:
    task: Task
    store: Store
    start: int | None
    restored: int = 0
    done: bool = False


@dataclass
class _Restoring:
    task: Task
    partitions: set[TP] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)


class ChangelogReader:
    """Restores registered tasks; not thread-safe (runs on the processing thread)."""

    def __init__(self, consumer: RestoreConsumer, metrics: Metrics, batch_records: int) -> None:
        self._consumer = consumer
        self._metrics = metrics
        self._batch = batch_records
        self._changelogs: dict[TP, _Changelog] = {}
        self._tasks: dict[object, _Restoring] = {}
        self._log = get_logger(component="changelog_reader")

    def register(self, task: Task) -> None:
        """Start restoring every store of ``task`` from its stored offset."""
        positions = task.restore_positions()
        stores = task.store_for_changelog()
        entry = _Restoring(task, set(positions))
        for tp, start in positions.items():
            self._changelogs[tp] = _Changelog(task, stores[tp], start)
        self._tasks[task.id] = entry
        self._consumer.add(positions)
        task.log.info("restore.start", positions={f"{t}-{p}": o for (t, p), o in positions.items()})

    def unregister(self, task: Task) -> None:
        """Stop restoring ``task`` (closed or revoked mid-restore); progress so far is kept."""
        entry = self._tasks.pop(task.id, None)
        if entry is None:
            return
        self._consumer.remove(entry.partitions)
        for tp in entry.partitions:
            self._changelogs.pop(tp, None)

    def restoring(self) -> bool:
        return bool(self._tasks)

    def step(self, timeout: float) -> list[Task]:
        """Fetch and apply one batch; return the tasks whose stores reached the end."""
        if not self._tasks:
            return []
        batch = self._consumer.fetch(self._batch, timeout)
        for tp, records in batch.records.items():
            changelog = self._changelogs.get(tp)
            if changelog is not None:
                self._apply(tp, changelog, records)
        for tp in batch.end_offsets:
            changelog = self._changelogs.get(tp)
            if changelog is not None:
                changelog.done = True
        return self._finish_completed()

    def _apply(
        self, tp: TP, changelog: _Changelog, records: list[tuple[int, bytes | None, bytes | None]]
    ) -> None:
        # Null keys cannot address a store entry; Kafka Streams skips them too.
        pairs = [(key, value) for _, key, value in records if key is not None]
        changelog.store.apply_restored(pairs, {tp: records[-1][0]})
        changelog.restored += len(pairs)
        changelog.done = False
        self._metrics.restored_records.labels(
            task=str(changelog.task.id), store=changelog.store.name
        ).inc(len(pairs))

    def _finish_completed(self) -> list[Task]:
        finished: list[Task] = []
        for entry in list(self._tasks.values()):
            logs = [self._changelogs[tp] for tp in entry.partitions]
            if all(c.done for c in logs):
                for changelog in logs:
                    changelog.store.flush()
                self.unregister(entry.task)
                entry.task.log.info(
                    "restore.done",
                    records=sum(c.restored for c in logs),
                    seconds=round(time.monotonic() - entry.started, 3),
                )
                finished.append(entry.task)
        return finished
