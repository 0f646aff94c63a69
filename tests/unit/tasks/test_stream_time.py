"""A task's stream time across commits: committed with the source offsets (metadata) and
in its stores, resumed after a restart or on a new owner, reset with uncommitted work;
and the timestamps its changelog records carry."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeCollector, FakeGroupOffsets, FakeMessage
from tests.unit.tasks.conftest import COUNTS, COUNTS_CHANGELOG, EVENTS, T01, encode
from worker.assignment.task_id import TP
from worker.clock import FakeClock
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.processing.timestamps import decode_stream_time
from worker.state.directory import StateDirectory
from worker.state.stream_time_marker import STREAM_TIME_KEY
from worker.tasks.commit_protocols import AtLeastOnceCommit, ExactlyOnceCommit
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

EV = (EVENTS, 1)


def event(offset: int, key: str, timestamp: int) -> FakeMessage:
    return FakeMessage(EVENTS, 1, offset, key.encode(), encode({}), timestamp)


def started(ctx: TaskContext, topology: BuiltTopology, group: FakeGroupOffsets) -> Task:
    """A task opened and taken to RUNNING as the registry does (offsets from ``group``)."""
    task = Task(T01, TaskRole.ACTIVE, topology.subtopologies[0], ctx)
    task.open()
    task.transition(TaskState.RESTORING)
    task.transition(TaskState.RUNNING)
    found = group.committed_with_metadata(task.source_partitions)
    task.resume_stream_time({tp: metadata for tp, (_, metadata) in found.items()})
    task.start_positions({tp: offset for tp, (offset, _) in found.items()})
    return task


def commit(task: Task, collector: FakeCollector, group: FakeGroupOffsets) -> None:
    """An at-least-once commit, as the committer runs it."""
    offsets = AtLeastOnceCommit(collector, group, 1.0)([task])  # type: ignore[arg-type]
    task.mark_sources_committed(offsets)


def gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("worker_task_stream_time_ms", {"task": "0_1"})


@pytest.fixture
def group() -> FakeGroupOffsets:
    return FakeGroupOffsets()


@pytest.fixture
def task(ctx: TaskContext, topology: BuiltTopology, group: FakeGroupOffsets) -> Iterator[Task]:
    made = started(ctx, topology, group)
    yield made
    made.close(clean=False)


def test_a_task_starts_without_stream_time_and_takes_the_largest_timestamp(task: Task) -> None:
    assert task.stream_time == -1

    task.process_run([event(0, "a", 500), event(1, "b", 200), event(2, "a", 900)], 0)

    assert task.stream_time == 900


def test_a_commit_writes_the_stream_time_with_the_offsets_and_in_the_stores(
    task: Task, collector: FakeCollector, group: FakeGroupOffsets, metrics: Metrics
) -> None:
    task.process_run([event(0, "a", 500), event(1, "b", 900), event(2, "a", 700)], 0)

    commit(task, collector, group)

    assert group.offsets == {EV: 3}
    assert decode_stream_time(group.metadata[EV]) == 900
    assert all(store.committed_stream_time == 900 for store in task.stores.values())
    assert gauge(metrics) == 900


def test_changelog_records_carry_the_timestamp_of_their_write(
    task: Task, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    task.process_run([event(0, "a", 500), event(1, "b", 900), event(2, "a", 700)], 0)

    commit(task, collector, group)

    stamps = {r.key: r.timestamp for r in collector.changelog if r.topic == COUNTS_CHANGELOG}
    assert stamps == {b"a": 700, b"b": 900, STREAM_TIME_KEY: 900}, "the marker: stream time"
    assert [r.timestamp for r in collector.sent] == [500, 900, 700]


def test_uncommitted_stream_time_is_dropped_with_the_uncommitted_work(
    task: Task, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    task.process_run([event(0, "a", 500)], 0)
    commit(task, collector, group)
    task.process_run([event(1, "a", 9_000)], 0)

    task.discard_uncommitted()

    assert task.stream_time == 500


@pytest.mark.parametrize("clean", [True, False])
def test_a_restarted_task_resumes_with_its_committed_stream_time_from_its_stores(
    ctx: TaskContext,
    topology: BuiltTopology,
    collector: FakeCollector,
    group: FakeGroupOffsets,
    clean: bool,
) -> None:
    first = started(ctx, topology, group)
    first.process_run([event(0, "a", 500), event(1, "a", 800)], 0)
    commit(first, collector, group)
    first.process_run([event(2, "a", 9_000)], 0)  # never committed
    first.close(clean=clean)
    group.metadata.clear()  # as the test broker does: no offset metadata kept

    second = started(ctx, topology, group)
    try:
        assert second.stream_time == 800
        second.process_run([event(2, "a", 600)], 0)
        assert second.stream_time == 800, "an older record does not take it back"
    finally:
        second.close(clean=False)


def test_a_task_on_a_new_owner_resumes_from_the_committed_offsets_metadata(
    ctx: TaskContext,
    topology: BuiltTopology,
    collector: FakeCollector,
    group: FakeGroupOffsets,
    tmp_path: Path,
    clock: FakeClock,
) -> None:
    first = started(ctx, topology, group)
    first.process_run([event(0, "a", 500), event(1, "a", 800)], 0)
    commit(first, collector, group)
    first.close(clean=True)
    elsewhere = StateDirectory(tmp_path / "elsewhere", "app", clock)
    elsewhere.open()

    moved = started(replace(ctx, state_dir=elsewhere), topology, group)
    try:
        assert moved.stream_time == 800
        assert moved.start_positions({EV: 2})[EV] == 2
    finally:
        moved.close(clean=False)
        elsewhere.close()


def test_a_task_without_any_committed_stream_time_starts_at_minus_one(
    task: Task, metrics: Metrics
) -> None:
    assert task.stream_time == -1
    assert gauge(metrics) == -1


def test_a_task_that_turns_standby_keeps_its_committed_stream_time_until_active_again(
    task: Task, collector: FakeCollector, group: FakeGroupOffsets
) -> None:
    task.process_run([event(0, "a", 500)], 0)
    commit(task, collector, group)
    task.transition(TaskState.SUSPENDED)

    task.recycle(TaskRole.STANDBY)
    assert task.stream_time == -1, "a standby has none of its own"
    task.recycle(TaskRole.ACTIVE)
    task.resume_stream_time({EV: group.metadata[EV]})

    assert task.stream_time == 500


class RecordingTransaction:
    """The transactional producer's commit, recorded."""

    def __init__(self) -> None:
        self.commits: list[tuple[dict[TP, int], dict[TP, str]]] = []

    def commit(
        self, offsets: Mapping[TP, int], group_metadata: bytes, metadata: Any = None
    ) -> None:
        self.commits.append((dict(offsets), dict(metadata or {})))


def test_exactly_once_commits_the_stream_time_as_the_offsets_metadata(
    task: Task, collector: FakeCollector
) -> None:
    transaction = RecordingTransaction()
    protocol = ExactlyOnceCommit(collector, transaction, lambda: b"member")  # type: ignore[arg-type]
    task.process_run([event(0, "a", 500), event(1, "b", 900)], 0)

    task.mark_sources_committed(protocol([task]))

    ((offsets, metadata),) = transaction.commits
    assert offsets == {EV: 2}
    assert decode_stream_time(metadata[EV]) == 900
    assert task.stores[COUNTS].committed_stream_time == 900
