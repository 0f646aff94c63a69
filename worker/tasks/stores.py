"""Opening a task's store as its spec says: key-value (with a TTL or not), versioned, or
windowed with its layout."""

from __future__ import annotations

from pathlib import Path

from worker.assignment.task_id import TaskId
from worker.clock import Clock, SystemClock
from worker.events import RECORD_LATE
from worker.observability import Metrics, ThrottledLog, get_logger
from worker.processing.built_topology import StoreSpec
from worker.processing.join_windows import JoinWindows
from worker.processing.windows import SessionWindows, SlidingWindows
from worker.state import ttl_store
from worker.state.join_buffer import JoinBufferStore
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store
from worker.state.versioned_store import VersionedStore
from worker.state.window_store import WindowedStore, WindowLayout
from worker.state.window_stores import FixedWindowStore, SessionStore

LOGGED_KEY_BYTES = 64  # a late record's key is logged cut to this


def window_layout(spec: StoreSpec) -> WindowLayout | None:
    """The windowed layout of ``spec``'s store; None for a key-value store."""
    windows = spec.windows
    if windows is None:
        return None
    if isinstance(windows, JoinWindows):
        return WindowLayout(segmented=True, retention_ms=windows.retention_ms)
    if isinstance(windows, SessionWindows | SlidingWindows):
        ahead = windows.time_difference_ms + 1 if isinstance(windows, SlidingWindows) else 0
        return WindowLayout(
            segmented=True,
            retention_ms=windows.retention_ms,
            hold_until_emitted=spec.hold_until_emitted,
            max_ahead_ms=ahead,
        )
    return WindowLayout(
        segmented=False,
        retention_ms=windows.retention_ms,
        size_ms=windows.size_ms,
        advance_ms=windows.advance_ms,
        hold_until_emitted=spec.hold_until_emitted,
    )


class WindowMetrics:
    """A windowed store's events as the task's metrics (labels task and store; late
    records: task and processor, the aggregation that owns the store and shares its name).
    Late records are logged too (``record.late``: partition, key, how late; one line a
    second at most per store), so an operator sees which data came late, not only how
    much."""

    def __init__(self, metrics: Metrics, task: str, store: str, clock: Clock) -> None:
        self._late_log = ThrottledLog(get_logger(task_id=task, store=store), clock.monotonic)
        self._ranges = metrics.window_expiry_ranges.labels(task=task, store=store)
        self._writes = metrics.window_expired_writes.labels(task=task, store=store)
        self._skipped = metrics.window_restore_skipped.labels(task=task, store=store)
        # labelled on the first late record: only stores of aggregations have any
        self._late_records, self._task, self._store = metrics.late_records, task, store

    def expiry_range(self) -> None:
        self._ranges.inc()

    def expired_write(self) -> None:
        self._writes.inc()

    def restore_skipped(self, records: int) -> None:
        self._skipped.inc(records)

    def late_record(self, partition: int | None, key: bytes | None, late_ms: int) -> None:
        self._late_records.labels(task=self._task, processor=self._store).inc()
        shown = None if key is None else key[:LOGGED_KEY_BYTES].decode("utf-8", "replace")
        self._late_log.warning(RECORD_LATE, partition=partition, key=shown, late_ms=late_ms)


def open_store(
    spec: StoreSpec,
    path: Path,
    env: RocksDBEnv,
    task: TaskId | None = None,
    metrics: Metrics | None = None,
    clock: Clock | None = None,
) -> Store:
    """Open ``spec``'s store at ``path``; a windowed store reports what it drops to
    ``metrics`` (labelled with ``task``), when given.

    Raises: as :meth:`Store.open`.
    """
    if spec.history_ms is not None:
        return VersionedStore.open_versioned(path, env, spec.name, spec.history_ms)
    layout = window_layout(spec)
    if layout is None:
        return ttl_store.open_store(path, env, spec.name, spec.ttl_ms)
    events = None
    if metrics is not None:
        events = WindowMetrics(metrics, str(task), spec.name, clock or SystemClock())
    kind: type[WindowedStore] = SessionStore if layout.segmented else FixedWindowStore
    if isinstance(spec.windows, JoinWindows):
        kind = JoinBufferStore
    return kind.open_windowed(path, env, spec.name, layout, events)
