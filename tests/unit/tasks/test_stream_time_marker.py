"""The stream time in the changelog (worker/state/stream_time_marker.py): a commit writes
a marker when the stream time advanced; a standby tailing the changelog and a task
restored from scratch learn it from the marker, with no offset metadata (the test broker
drops it), and the marker never reaches a store's data.

The old owner and the new one are two tasks over separate state directories; the records
the old one's collector sent are served to the new one's restore consumer, as the broker
would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fakes import FakeCollector, FakeGroupOffsets, FakeRestoreConsumer
from tests.unit.tasks.conftest import COUNTS, COUNTS_CHANGELOG, LABELS, T01
from tests.unit.tasks.test_stream_time import commit, event, gauge, started
from worker.clock import FakeClock
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.processing.context import ProcessorContext
from worker.state.directory import StateDirectory
from worker.state.restore import ChangelogReader
from worker.state.stream_time_marker import STREAM_TIME_KEY, marker_headers, stream_time_of
from worker.tasks.commit_protocols import ExactlyOnceCommit
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

CL = (COUNTS_CHANGELOG, 1)


class Transaction:
    """The transactional producer's commit: what the collector held when it came."""

    def __init__(self, collector: FakeCollector) -> None:
        self.collector = collector
        self.markers_at_commit: list[list[int]] = []

    def commit(self, offsets: object, group_metadata: object, metadata: object = None) -> None:
        self.markers_at_commit.append(self.collector.stream_time_markers(*CL))


@pytest.fixture
def group() -> FakeGroupOffsets:
    return FakeGroupOffsets()


@pytest.fixture
def elsewhere(ctx: TaskContext, tmp_path: Path, clock: FakeClock) -> Iterator[TaskContext]:
    """Another instance's task context: its own, empty, state directory."""
    state_dir = StateDirectory(tmp_path / "elsewhere", "app", clock)
    state_dir.open()
    yield replace(ctx, state_dir=state_dir)
    state_dir.close()


def served(collector: FakeCollector) -> FakeRestoreConsumer:
    """A restore consumer reading what ``collector`` sent to the changelogs."""
    consumer = FakeRestoreConsumer()
    for record in collector.changelog:
        assert record.partition is not None
        consumer.append(record.topic, record.partition, record.key, record.value, record.headers)
    return consumer


def read_all(reader: ChangelogReader[Task], consumer: FakeRestoreConsumer) -> list[Task]:
    finished: list[Task] = []
    for _ in range(20):
        finished += reader.step(0.0)
        if all(at >= consumer.end_offset(tp) for tp, at in consumer.positions.items()):
            finished += reader.step(0.0)
            return finished
    raise AssertionError("the changelogs were not read to their end")


def data_keys(task: Task) -> list[bytes]:
    return [key for key, _ in task.stores[COUNTS].iter_committed()]


def old_owner_committed(
    ctx: TaskContext, topology: BuiltTopology, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    """The old owner processes to stream time 800, commits, and goes; the group keeps no
    offset metadata (the test broker)."""
    old = started(ctx, topology, group)
    old.process_run([event(0, "a", 500), event(1, "b", 800), event(2, "a", 700)], 0)
    commit(old, collector, group)
    old.close(clean=True)
    group.metadata.clear()


def test_a_commit_writes_a_marker_after_the_changelog_records_when_stream_time_advanced(
    ctx: TaskContext, topology: BuiltTopology, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    task = started(ctx, topology, group)
    try:
        task.process_run([event(0, "a", 500)], 0)
        commit(task, collector, group)
        task.process_run([event(1, "a", 400)], 0)  # stream time stays 500
        commit(task, collector, group)
        task.process_run([event(2, "b", 900)], 0)
        commit(task, collector, group)
    finally:
        task.close(clean=False)

    assert collector.stream_time_markers(*CL) == [500, 900]
    keys = [r.key for r in collector.changelog]
    assert keys == [b"a", STREAM_TIME_KEY, b"a", b"b", STREAM_TIME_KEY]
    assert collector.stream_time_markers(LABELS, 1) == [], "never into a table's topic"
    assert [r.timestamp for r in collector.changelog if r.key == STREAM_TIME_KEY] == [500, 900]


def test_exactly_once_writes_the_marker_inside_the_transaction_before_its_commit(
    ctx: TaskContext, topology: BuiltTopology, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    transaction = Transaction(collector)
    protocol = ExactlyOnceCommit(collector, transaction, lambda: b"member")  # type: ignore[arg-type]
    task = started(ctx, topology, group)
    try:
        task.process_run([event(0, "a", 500)], 0)
        protocol([task])
    finally:
        task.close(clean=False)

    assert transaction.markers_at_commit == [[500]]


def test_a_marker_whose_commit_failed_is_written_again_with_the_next(
    ctx: TaskContext, topology: BuiltTopology, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    task = started(ctx, topology, group)
    try:
        task.process_run([event(0, "a", 500)], 0)
        task.produce_changelogs()  # the commit fails here: no store written, nothing committed
        commit(task, collector, group)
    finally:
        task.close(clean=False)

    assert collector.stream_time_markers(*CL) == [500, 500]


def test_a_standby_learns_the_stream_time_from_the_changelog_and_resumes_with_it(
    ctx: TaskContext,
    elsewhere: TaskContext,
    topology: BuiltTopology,
    collector: FakeCollector,
    group: FakeGroupOffsets,
    metrics: Metrics,
) -> None:
    standby = Task(T01, TaskRole.STANDBY, topology.subtopologies[0], elsewhere)
    standby.open()
    standby.transition(TaskState.RUNNING, "tailing")
    try:
        old_owner_committed(ctx, topology, collector, group)
        consumer = served(collector)
        reader: ChangelogReader[Task] = ChangelogReader(consumer, metrics, 1000)  # type: ignore[arg-type]
        reader.register(standby, standby=True)
        read_all(reader, consumer)

        store = standby.stores[COUNTS]
        assert store.committed_stream_time == 800
        assert data_keys(standby) == [b"a", b"b"], "the marker is no data"
        assert store.committed_offsets() == {CL: 2}, "the marker's offset is applied"

        reader.unregister(standby)
        standby.transition(TaskState.SUSPENDED)
        standby.recycle(TaskRole.ACTIVE)
        standby.resume_stream_time({})
        assert standby.stream_time == 800
        assert gauge(metrics) == 800
    finally:
        standby.close(clean=False)


def test_a_wiped_task_restored_from_its_changelog_resumes_the_committed_stream_time(
    ctx: TaskContext,
    elsewhere: TaskContext,
    topology: BuiltTopology,
    collector: FakeCollector,
    group: FakeGroupOffsets,
    metrics: Metrics,
) -> None:
    old_owner_committed(ctx, topology, collector, group)
    consumer = served(collector)
    restored = Task(T01, TaskRole.ACTIVE, topology.subtopologies[0], elsewhere)
    restored.open()
    try:
        restored.transition(TaskState.RESTORING)
        reader: ChangelogReader[Task] = ChangelogReader(consumer, metrics, 1000)  # type: ignore[arg-type]
        reader.register(restored)
        assert read_all(reader, consumer) == [restored]
        restored.transition(TaskState.RUNNING)
        restored.resume_stream_time({})

        assert restored.stream_time == 800
        assert data_keys(restored) == [b"a", b"b"]
        restored.process_run([event(3, "a", 600)], 0)
        assert restored.stream_time == 800, "an older record does not take it back"
    finally:
        restored.close(clean=False)


def test_a_garbled_marker_is_skipped_and_never_lowers_the_stored_stream_time(
    elsewhere: TaskContext, topology: BuiltTopology, metrics: Metrics
) -> None:
    consumer = FakeRestoreConsumer()
    consumer.append(*CL, STREAM_TIME_KEY, None, marker_headers(900))
    consumer.append(*CL, STREAM_TIME_KEY, None, [("worker.stream_time", b"short")])
    consumer.append(*CL, STREAM_TIME_KEY, None, marker_headers(300))
    standby = Task(T01, TaskRole.STANDBY, topology.subtopologies[0], elsewhere)
    standby.open()
    standby.transition(TaskState.RUNNING, "tailing")
    try:
        reader: ChangelogReader[Task] = ChangelogReader(consumer, metrics, 1)  # type: ignore[arg-type]
        reader.register(standby, standby=True)
        read_all(reader, consumer)
        assert standby.stores[COUNTS].committed_stream_time == 900
        assert data_keys(standby) == []
    finally:
        standby.close(clean=False)


def test_marker_headers_round_trip() -> None:
    assert stream_time_of(marker_headers(1_700_000_000_123)) == 1_700_000_000_123
    assert stream_time_of(None) == -1
    assert stream_time_of([("other", b"12345678")]) == -1


def test_a_write_in_a_punctuation_carries_the_punctuation_time(
    ctx: TaskContext, topology: BuiltTopology, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    """A punctuation runs with the context's ``timestamp`` set to its time (worker.
    processing.punctuators): the store's writes, and so their changelog records, carry it."""
    task = started(ctx, topology, group)
    try:
        store = task.stores[COUNTS]
        punctuation = ProcessorContext("0_1")
        store.stamp_writes(punctuation)
        punctuation.timestamp = 7_000
        store.put(b"swept", b"1")
        task.produce_changelogs()
    finally:
        task.close(clean=False)

    assert [(r.key, r.timestamp) for r in collector.changelog] == [(b"swept", 7_000)]
