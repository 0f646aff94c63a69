"""A task with a window store, kept as a standby by the changelog reader: its store stays
bounded by retention however long the changelog, and an active made from it reads the
same live windows."""

from __future__ import annotations

from tests.fakes import FakeRestoreConsumer
from tests.unit.tasks.conftest import APP, T01
from worker.observability import Metrics
from worker.processing import Topology
from worker.serde import JSON, STR
from worker.state.restore import ChangelogReader
from worker.state.window_format import OBSERVED_MS, encode_meta, encode_value, fixed_key
from worker.state.window_stores import FixedWindowStore
from worker.tasks.state import TaskRole
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

MINUTE = 60_000
CHANGELOG = (f"{APP}-per-minute-changelog", 1)


def windowed_topology():  # type: ignore[no-untyped-def]
    return (
        Topology()
        .add_source("events", "events", STR, JSON)
        .add_window_store(
            "per-minute",
            MINUTE,
            grace_ms=0,
            retention_ms=2 * MINUTE,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_processor("count", lambda ctx, k, v: None, ["events"], stores=["per-minute"])
        .build()
    )


def test_a_standby_window_store_stays_bounded_by_retention(ctx: TaskContext) -> None:
    changelogs = FakeRestoreConsumer()
    minutes = 60
    for minute in range(minutes):  # an hour of history, as its active committed it
        for key in (b'"a"', b'"b"'):
            stored = fixed_key(minute * MINUTE, key)
            changelogs.append(CHANGELOG[0], 1, stored, encode_value(minute * MINUTE, b"1"))
        changelogs.append(CHANGELOG[0], 1, OBSERVED_MS, encode_meta(minute * MINUTE))
    task = Task(T01, TaskRole.STANDBY, windowed_topology().subtopologies[0], ctx)
    task.open()
    try:
        reader = ChangelogReader(changelogs, Metrics(), batch_records=30)  # type: ignore[arg-type]
        reader.register(task, standby=True)
        for _ in range(20):
            reader.step(0.0)
        assert reader.lag(task.id) == 0
        store = task.stores["per-minute"]
        assert isinstance(store, FixedWindowStore)
        on_disk = [k for k, _ in store.iter_committed() if k[0] != 0xFF]
        # retention 2 minutes in expiry steps of 1 minute: at most 4 starts of 2 keys
        assert len(on_disk) <= 8
        assert store.observed_ms == (minutes - 1) * MINUTE
        labels = {"task": str(T01), "store": "per-minute"}
        skipped = ctx.metrics.registry.get_sample_value(
            "worker_window_restore_skipped_records_total", labels
        )
        assert skipped is not None and skipped > 0
        ranges = ctx.metrics.registry.get_sample_value("worker_window_expiry_ranges_total", labels)
        assert ranges is not None and ranges > 0
        live = [(w.key, w.start_ms) for w in store.fetch_all_windows(0, minutes * MINUTE)]
        assert live == [
            (key, minute * MINUTE)
            for minute in range(minutes - 3, minutes)
            for key in (b'"a"', b'"b"')
        ]
    finally:
        task.close(clean=False)


def test_a_cold_restore_reads_the_changelog_tail_first_and_writes_only_live_windows(
    ctx: TaskContext,
) -> None:
    changelogs = FakeRestoreConsumer()
    minutes = 60
    for minute in range(minutes):
        for key in (b'"a"', b'"b"'):
            stored = fixed_key(minute * MINUTE, key)
            changelogs.append(CHANGELOG[0], 1, stored, encode_value(minute * MINUTE, b"1"))
        changelogs.append(CHANGELOG[0], 1, OBSERVED_MS, encode_meta(minute * MINUTE))
    asked: list[set[tuple[str, int]]] = []

    def tail(partitions):  # type: ignore[no-untyped-def]
        asked.append(set(partitions))
        return {tp: [(k, v) for _o, k, v in changelogs.logs[tp][-3:]] for tp in partitions}

    task = Task(T01, TaskRole.ACTIVE, windowed_topology().subtopologies[0], ctx)
    task.open()
    try:
        reader = ChangelogReader(changelogs, Metrics(), 30, tail=tail)  # type: ignore[arg-type]
        reader.register(task)
        for _ in range(20):
            if reader.step(0.0):
                break
        assert asked == [{CHANGELOG}]
        store = task.stores["per-minute"]
        assert isinstance(store, FixedWindowStore)
        on_disk = [k for k, _ in store.iter_committed() if k[0] != 0xFF]
        assert len(on_disk) == 6  # starts 57, 58 and 59 of both keys: never wrote others
        assert store.restore_skipped == 2 * (minutes - 3)
    finally:
        task.close(clean=False)
