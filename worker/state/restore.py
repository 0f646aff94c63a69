"""The changelog reader: restores active tasks' stores and keeps standby copies current.

Two kinds of registration share one restore consumer:

- an *active restore* reads from each store's stored offset + 1 to the end of the
  changelog and then completes, handing the task back to processing;
- a *standby update* (standbys and warmups) tails the changelog for as long as the task
  is registered and never completes; its lag is what the assignor's catch-up decisions
  and ``worker_standby_lag_records`` rest on.

Every batch is written to RocksDB together with its last offset, so a crash during a
restore or update resumes where it stopped. "The end" is the high watermark carried by
the fetch path (the partition-EOF event, or the watermark cached from the last fetch),
never ListOffsets alone (platform-facts: the test broker's ListOffsets is wrong for
multi-record batches). While any active restores, standby partitions are paused so the
task that blocks processing gets the whole fetch budget.

The processing loop drives it with ``step()``; each call does a bounded amount of work so
group heartbeats and commits of running tasks continue while other tasks restore.

Release markers (:mod:`worker.state.release_marker`) are tombstones, applied like any
other; the reader also keeps each one it reads for :meth:`ChangelogReader.take_markers`.
Stream-time markers (:mod:`worker.state.stream_time_marker`) are tombstones too, but never
applied: the stream time they carry goes into the store's offsets family with the batch,
so a standby or a restored task resumes with it. Only tombstones' keys are compared.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from worker.assignment.task_id import TP, TaskId
from worker.clock import Clock, SystemClock
from worker.errors import StoreCorrupted
from worker.events import RESTORE_DONE, RESTORE_START, STANDBY_START
from worker.kafka.consumers import RestoreConsumer
from worker.lifecycle import StateMachine
from worker.observability import Metrics, get_logger
from worker.state.release_marker import RELEASE_KEY, ReleaseMarker
from worker.state.store import RestoreBatch, Store
from worker.state.stream_time_marker import STREAM_TIME_KEY, stream_time_of


class Restorable(Protocol):
    """What the reader needs of a task (tasks/ sits above state/, so it is not imported)."""

    @property
    def id(self) -> TaskId: ...

    @property
    def log(self) -> Any: ...

    def restore_positions(self) -> dict[TP, int | None]: ...

    def store_for_changelog(self) -> dict[TP, Store]: ...


T = TypeVar("T", bound=Restorable)
TailRecords = list[tuple[bytes, bytes | None]]
TailReader = Callable[[Iterable[TP]], Mapping[TP, TailRecords]]


@runtime_checkable
class TailAware(Protocol):
    """A store that reads the end of its changelog before restoring it (windowed stores:
    ``WindowedStore.learn_changelog_tail``)."""

    def learn_changelog_tail(self, records: Iterable[tuple[bytes, bytes | None]]) -> None: ...


class ChangelogState(enum.Enum):
    """One registered changelog partition.

    An active restore reads until the end (RESTORING <-> AT_END: records that arrive after
    an end was seen make it RESTORING again) and is COMPLETED when every partition of its
    task is AT_END at once. A standby's partition is UPDATING for as long as it is
    registered: it never completes.
    """

    RESTORING = "restoring"
    AT_END = "at_end"
    COMPLETED = "completed"
    UPDATING = "updating"


_C = ChangelogState
CHANGELOG_ALLOWED: dict[ChangelogState, frozenset[ChangelogState]] = {
    _C.RESTORING: frozenset({_C.AT_END}),
    _C.AT_END: frozenset({_C.RESTORING, _C.COMPLETED}),
    _C.COMPLETED: frozenset(),
    _C.UPDATING: frozenset(),
}


@dataclass
class _Changelog:
    task: Restorable
    store: Store
    position: int  # the next offset this store needs
    standby: bool
    fsm: StateMachine[ChangelogState]
    applied: int = 0
    end: int | None = None  # the last end (high watermark) seen for this partition

    def reached_end(self, end: int) -> None:
        self.end = end
        self.position = max(self.position, end)
        if self.fsm.state is ChangelogState.RESTORING:
            self.fsm.transition(ChangelogState.AT_END, end=end)

    def applied_records(self, last: int, count: int) -> None:
        self.position = last + 1
        self.applied += count
        if self.fsm.state is ChangelogState.AT_END:
            self.fsm.transition(ChangelogState.RESTORING, "records after the end")


@dataclass(slots=True)
class _Run:
    """One changelog partition's records within a fetched batch."""

    changelog: _Changelog | None  # None: no longer registered, the records are dropped
    batch: RestoreBatch | None
    put: Callable[[bytes, bytes], None]
    delete: Callable[[bytes], None]
    last: int = -1  # offset of the run's last message, null keys included
    stream_time: int = -1  # the latest stream-time marker's (-1: none in this run)

    def mark_stream_time(self, headers: Any) -> None:
        """A stream-time marker's ``headers``: its time goes with the run's batch."""
        self.stream_time = max(self.stream_time, stream_time_of(headers))


def _ignore(*_args: Any) -> None:
    """Stands in for ``put``/``delete`` of a changelog that is no longer registered."""


@dataclass
class _Registration(Generic[T]):
    task: T
    standby: bool
    started: float
    partitions: set[TP] = field(default_factory=set)


class ChangelogReader(Generic[T]):
    """Restores and updates registered tasks; not thread-safe (runs on the processing thread)."""

    def __init__(
        self,
        consumer: RestoreConsumer,
        metrics: Metrics,
        batch_records: int,
        clock: Clock | None = None,
        tail: TailReader | None = None,
    ) -> None:
        """``tail`` reads the last records of changelog partitions (None: never read)."""
        self._consumer = consumer
        self._tail = tail
        self._metrics = metrics
        self._batch = batch_records
        self._clock = clock or SystemClock()
        self._changelogs: dict[TP, _Changelog] = {}
        self._tasks: dict[TaskId, _Registration[T]] = {}
        self._standbys_paused = False
        self._markers: list[tuple[TP, ReleaseMarker]] = []
        # Tasks a write met corruption in, with the reason; held for take_corrupted().
        self._corrupted: dict[TaskId, tuple[T, str]] = {}
        self._log = get_logger(component="changelog_reader")

    def register(self, task: T, standby: bool = False) -> None:
        """Start restoring (active) or tailing (standby) every store of ``task``."""
        positions = task.restore_positions()
        stores = task.store_for_changelog()
        entry = _Registration(task, standby, self._clock.monotonic(), set(positions))
        initial = ChangelogState.UPDATING if standby else ChangelogState.RESTORING
        for tp, start in positions.items():
            log = task.log.bind(changelog=f"{tp[0]}-{tp[1]}")
            fsm = StateMachine(
                "changelog",
                initial,
                CHANGELOG_ALLOWED,
                log,
                transitions=self._metrics.changelog_transitions,
            )
            self._changelogs[tp] = _Changelog(task, stores[tp], start or 0, standby, fsm)
        self._tasks[task.id] = entry
        self._learn_tails(stores)
        self._consumer.add(positions)
        if standby and self._standbys_paused:
            self._consumer.pause(positions)
        event = STANDBY_START if standby else RESTORE_START
        task.log.info(event, positions={f"{t}-{p}": o for (t, p), o in positions.items()})

    def _learn_tails(self, stores: Mapping[TP, Store]) -> None:
        """Before reading, hand each :class:`TailAware` store its changelog's last records."""
        aware = {tp: store for tp, store in stores.items() if isinstance(store, TailAware)}
        if not aware or self._tail is None:
            return
        for tp, records in self._tail(aware).items():
            aware[tp].learn_changelog_tail(records)

    def unregister(self, task: T) -> None:
        """Stop reading for ``task`` (closed, revoked or recycled); progress so far is kept."""
        entry = self._tasks.pop(task.id, None)
        if entry is None:
            return
        self._consumer.remove(entry.partitions)
        for tp in entry.partitions:
            self._changelogs.pop(tp, None)
        if entry.standby:
            self._metrics.standby_lag.remove_task(str(task.id))

    def restoring(self) -> bool:
        """True while some active task is still restoring."""
        return any(not entry.standby for entry in self._tasks.values())

    def has_work(self) -> bool:
        return bool(self._tasks)

    def step(self, timeout: float) -> list[T]:
        """Fetch and apply one batch; return the active tasks whose stores reached the end."""
        if not self._tasks:
            return []
        self._prioritise_actives()
        batch = self._consumer.fetch(self._batch, timeout)
        if batch.messages:
            self._apply(batch.messages)
        for tp, end in batch.end_offsets.items():
            changelog = self._changelogs.get(tp)
            if changelog is not None:
                changelog.reached_end(end)
        self._publish_lags()
        return self._finish_completed()

    def take_markers(self) -> list[tuple[TP, ReleaseMarker]]:
        """The release markers read since the last call, with their changelog partitions."""
        markers, self._markers = self._markers, []
        return markers

    def take_corrupted(self) -> list[tuple[T, str]]:
        """The registered tasks whose stores met corruption since the last call, each with
        the reason. Their batches were not written and they never complete: the caller
        unregisters them, wipes their stores and registers them again."""
        found, self._corrupted = self._corrupted, {}
        return list(found.values())

    def lag(self, task_id: TaskId) -> int | None:
        """Records a registered task's stores are behind their changelogs; None if unknown."""
        entry = self._tasks.get(task_id)
        if entry is None:
            return None
        total = 0
        for tp in entry.partitions:
            changelog = self._changelogs[tp]
            end = self._current_end(tp, changelog)
            if end is None:
                return None
            total += max(0, end - changelog.position)
        return total

    def _current_end(self, tp: TP, changelog: _Changelog) -> int | None:
        cached = self._consumer.high_watermark(tp)
        ends = [e for e in (cached, changelog.end) if e is not None]
        return max(ends) if ends else None

    def _prioritise_actives(self) -> None:
        pause = self.restoring()
        if pause == self._standbys_paused:
            return
        standby = [tp for tp, c in self._changelogs.items() if c.standby]
        if pause:
            self._consumer.pause(standby)
        else:
            self._consumer.resume(standby)
        self._standbys_paused = pause

    def _apply(self, messages: list[Any]) -> None:
        """Write fetched changelog messages into their stores, one atomic batch per store.

        This is restore's per-record path, kept to a few calls per record: each message
        goes straight into its store's write batch. librdkafka hands over the messages of
        one partition in runs (a fetched message set is queued whole), so the store is
        looked up once per run, not once per record. Null keys cannot address a store
        entry (Kafka Streams skips them too); their offsets still count.
        """
        runs: dict[TP, _Run] = {}
        run: _Run | None = None
        topic: str | None = None
        partition = -1
        put = delete = mark = _ignore
        last: Any = None
        for msg in messages:
            if msg.partition() != partition or msg.topic() != topic:
                if run is not None:
                    run.last = last.offset()
                topic, partition = msg.topic(), msg.partition()
                run = runs.get((topic, partition))
                if run is None:
                    run = runs[(topic, partition)] = self._run_for((topic, partition))
                put, delete, mark = run.put, run.delete, run.mark_stream_time
            last = msg
            key = msg.key()
            if key is not None:
                value = msg.value()
                if value is None:
                    if key == STREAM_TIME_KEY:
                        mark(msg.headers())
                        continue
                    delete(key)
                    if key == RELEASE_KEY:
                        self._keep_marker(msg)
                else:
                    put(key, value)
        if run is not None:
            run.last = last.offset()
        for tp, run in runs.items():
            if run.changelog is not None and run.batch is not None:
                self._write(tp, run, run.changelog, run.batch)

    def _keep_marker(self, msg: Any) -> None:
        marker = ReleaseMarker.from_headers(msg.headers())
        if marker is not None:
            self._markers.append(((msg.topic(), msg.partition()), marker))

    def _run_for(self, tp: TP) -> _Run:
        changelog = self._changelogs.get(tp)
        if changelog is None:  # unregistered since the fetch: its records are dropped
            return _Run(None, None, _ignore, _ignore)
        batch = changelog.store.restore_batch()
        return _Run(changelog, batch, batch.put, batch.delete)

    def _write(self, tp: TP, run: _Run, changelog: _Changelog, batch: RestoreBatch) -> None:
        applied, last = batch.len(), run.last
        task = changelog.task
        if task.id in self._corrupted:
            return
        try:
            changelog.store.write_restored(batch, {tp: last}, run.stream_time)
        except StoreCorrupted as exc:
            self._corrupted[task.id] = (task, exc.reason)  # type: ignore[assignment]
            return
        changelog.applied_records(last, applied)
        counter = (
            self._metrics.standby_updated_records
            if changelog.standby
            else self._metrics.restored_records
        )
        counter.labels(task=str(task.id), store=changelog.store.name).inc(applied)

    def _publish_lags(self) -> None:
        for task_id, entry in self._tasks.items():
            if entry.standby:
                lag = self.lag(task_id)
                if lag is not None:
                    self._metrics.standby_lag.labels(task=str(task_id)).set(lag)

    def _finish_completed(self) -> list[T]:
        finished: list[T] = []
        for entry in list(self._tasks.values()):
            if entry.standby or entry.task.id in self._corrupted:
                continue
            logs = [self._changelogs[tp] for tp in entry.partitions]
            if all(c.fsm.state is ChangelogState.AT_END for c in logs):
                try:
                    for changelog in logs:
                        changelog.store.flush_in_background()
                except StoreCorrupted as exc:
                    self._corrupted[entry.task.id] = (entry.task, exc.reason)
                    continue
                for changelog in logs:
                    changelog.fsm.transition(ChangelogState.COMPLETED)
                self.unregister(entry.task)
                entry.task.log.info(
                    RESTORE_DONE,
                    records=sum(c.applied for c in logs),
                    seconds=round(self._clock.monotonic() - entry.started, 3),
                )
                finished.append(entry.task)
        return finished
