"""The changelog reader (worker/state/restore.py): batches, offsets, ends, metrics.

A real task with real stores on ``tmp_path``, restored from the fake restore consumer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from tests.fakes import FakeRestoreConsumer
from tests.unit.tasks.conftest import COUNTS, COUNTS_CHANGELOG, LABELS, T01
from worker.assignment.task_id import TaskId
from worker.events import CHANGELOG_TRANSITION
from worker.kafka.consumers import FetchedBatch
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.state.restore import ChangelogReader
from worker.tasks.state import TaskRole
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

CL = (COUNTS_CHANGELOG, 1)
LB = (LABELS, 1)


@pytest.fixture
def task(ctx: TaskContext, topology: BuiltTopology) -> Iterator[Task]:
    opened = Task(T01, TaskRole.ACTIVE, topology.subtopologies[0], ctx)
    opened.open()
    yield opened
    opened.close(clean=False)


@pytest.fixture
def changelogs() -> FakeRestoreConsumer:
    return FakeRestoreConsumer()


def reader_for(
    changelogs: FakeRestoreConsumer, metrics: Metrics, batch: int
) -> ChangelogReader[Task]:
    return ChangelogReader(changelogs, metrics, batch_records=batch)  # type: ignore[arg-type]


def write(changelogs: FakeRestoreConsumer, tp: tuple[str, int], *records: tuple) -> None:
    for key, value in records:
        changelogs.append(tp[0], tp[1], key, value)


def committed(task: Task, store: str) -> dict[bytes, bytes]:
    return dict(task.stores[store].iter_committed())


def restore_all(reader: ChangelogReader[Task], max_steps: int = 50) -> list[list[Task]]:
    """Every step's finished tasks, until nothing is restoring."""
    steps = []
    while reader.restoring():
        steps.append(reader.step(0.0))
        assert len(steps) <= max_steps, "restore did not finish"
    return steps


def test_each_batch_is_applied_with_its_last_offset_per_changelog(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4"), (b"b", None))
    write(changelogs, LB, (b"a", b'"red"'))
    reader = reader_for(changelogs, metrics, batch=2)
    reader.register(task)

    assert reader.step(0.0) == []

    assert committed(task, COUNTS) == {b"a": b"1", b"b": b"2"}
    assert task.stores[COUNTS].committed_offsets() == {CL: 1}

    restore_all(reader)

    assert committed(task, COUNTS) == {b"a": b"3", b"c": b"4"}
    assert task.stores[COUNTS].committed_offsets() == {CL: 4}
    assert committed(task, LABELS) == {b"a": b'"red"'}
    assert task.stores[LABELS].committed_offsets() == {LB: 0}


def test_interleaved_changelog_records_reach_their_own_stores(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"), (b"b", b"2"), (b"a", b"3"))
    write(changelogs, LB, (b"a", b'"red"'), (b"b", b'"blue"'))
    fetch = changelogs.fetch

    def interleaved(max_records: int, timeout: float) -> FetchedBatch:
        """As librdkafka may hand them over: runs of each partition, alternating."""
        batch = fetch(max_records, timeout)
        by_tp = [[m for m in batch.messages if (m.topic(), m.partition()) == tp] for tp in (CL, LB)]
        mixed = [m for pair in itertools.zip_longest(*by_tp) for m in pair if m is not None]
        return FetchedBatch(mixed, batch.end_offsets)

    changelogs.fetch = interleaved  # type: ignore[method-assign]
    reader = reader_for(changelogs, metrics, batch=100)
    reader.register(task)

    assert restore_all(reader) == [[task]]
    assert committed(task, COUNTS) == {b"a": b"3", b"b": b"2"}
    assert committed(task, LABELS) == {b"a": b'"red"', b"b": b'"blue"'}
    assert task.stores[COUNTS].committed_offsets() == {CL: 2}
    assert task.stores[LABELS].committed_offsets() == {LB: 1}


def test_records_of_a_changelog_unregistered_since_the_fetch_are_dropped(
    task: Task,
    ctx: TaskContext,
    topology: BuiltTopology,
    changelogs: FakeRestoreConsumer,
    metrics: Metrics,
) -> None:
    other = Task(TaskId(0, 2), TaskRole.ACTIVE, topology.subtopologies[0], ctx)
    other.open()
    try:
        write(changelogs, CL, (b"a", b"1"))
        write(changelogs, (COUNTS_CHANGELOG, 2), (b"z", b"9"))
        reader = reader_for(changelogs, metrics, batch=100)
        reader.register(task)
        reader.register(other)
        fetch = changelogs.fetch

        def unregistering(max_records: int, timeout: float) -> FetchedBatch:
            batch = fetch(max_records, timeout)
            reader.unregister(other)  # closed between the fetch and the write
            return batch

        changelogs.fetch = unregistering  # type: ignore[method-assign]
        reader.step(0.0)

        assert committed(task, COUNTS) == {b"a": b"1"}
        assert committed(other, COUNTS) == {}
        assert other.stores[COUNTS].committed_offsets() == {}
    finally:
        other.close(clean=False)


def test_null_keys_are_skipped_but_their_offsets_still_count(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (None, b"x"), (b"k", b"1"), (None, b"y"))
    reader = reader_for(changelogs, metrics, batch=100)
    reader.register(task)

    restore_all(reader)

    assert committed(task, COUNTS) == {b"k": b"1"}
    assert task.stores[COUNTS].committed_offsets() == {CL: 2}
    assert (
        metrics.registry.get_sample_value(
            "worker_restored_records_total", {"task": "0_1", "store": COUNTS}
        )
        == 1
    )


def test_a_task_finishes_only_when_every_changelog_reported_its_end(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"), (b"b", b"1"))
    write(changelogs, LB, (b"a", b"1"), (b"b", b"1"), (b"c", b"1"))
    reader = reader_for(changelogs, metrics, batch=2)
    reader.register(task)

    steps = restore_all(reader)

    # Step 1 reads all of the counts changelog and its end; the labels one needs two more.
    assert steps == [[], [], [task]]
    assert changelogs.assigned == frozenset()
    assert not reader.restoring()


def test_a_task_with_empty_changelogs_finishes_at_the_first_step(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    reader = reader_for(changelogs, metrics, batch=10)
    reader.register(task)

    assert reader.step(0.0) == [task]


def test_restore_resumes_from_the_stored_offset_plus_one(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, *[(b"old-%d" % i, b"x") for i in range(10)], (b"new", b"1"))
    task.stores[COUNTS].commit({CL: 9})
    reader = reader_for(changelogs, metrics, batch=100)

    reader.register(task)
    restore_all(reader)

    assert changelogs.added == [{CL: 10, LB: None}]
    assert committed(task, COUNTS) == {b"new": b"1"}
    assert task.stores[COUNTS].committed_offsets() == {CL: 10}


def test_gaps_in_changelog_offsets_are_crossed_to_the_end(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"))
    changelogs.skip_offsets(*CL, 5)  # compacted away, or transaction markers
    write(changelogs, CL, (b"b", b"2"))
    changelogs.skip_offsets(*CL, 1)
    reader = reader_for(changelogs, metrics, batch=100)
    reader.register(task)

    assert restore_all(reader) == [[task]]
    assert task.stores[COUNTS].committed_offsets() == {CL: 6}


def test_restored_records_are_counted_per_task_and_store(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"), (b"b", b"1"), (b"c", None))
    write(changelogs, LB, (b"a", b"1"))
    reader = reader_for(changelogs, metrics, batch=2)
    reader.register(task)

    restore_all(reader)

    def restored(store: str) -> float | None:
        labels = {"task": "0_1", "store": store}
        return metrics.registry.get_sample_value("worker_restored_records_total", labels)

    assert (restored(COUNTS), restored(LABELS)) == (3, 1)


def test_unregistering_stops_a_restore_and_keeps_its_progress(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"), (b"b", b"1"), (b"c", b"1"))
    reader = reader_for(changelogs, metrics, batch=2)
    reader.register(task)
    reader.step(0.0)

    reader.unregister(task)
    reader.unregister(task)  # idempotent

    assert not reader.restoring()
    assert changelogs.assigned == frozenset()
    assert task.stores[COUNTS].committed_offsets() == {CL: 1}
    reader.register(task)
    assert changelogs.added[-1] == {CL: 2, LB: None}


def test_a_step_with_nothing_registered_fetches_nothing(
    changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    reader = reader_for(changelogs, metrics, batch=2)

    assert reader.step(0.0) == []
    assert changelogs.fetches == 0


def changelog_moves(logs: list[dict]) -> list[tuple[str, str, str]]:
    return [
        (e["changelog"], e["src"], e["dst"]) for e in logs if e["event"] == CHANGELOG_TRANSITION
    ]


def test_an_active_changelog_moves_restoring_at_end_completed_and_back_on_late_records(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"), (b"b", b"2"), (b"c", b"3"))
    reader = reader_for(changelogs, metrics, batch=2)
    reader.register(task)
    cl, lb = f"{CL[0]}-{CL[1]}", f"{LB[0]}-{LB[1]}"

    with capture_logs() as logs:
        assert reader.step(0.0) == []  # a and b; the empty labels changelog is at its end
        write(changelogs, LB, (b"x", b'"late"'))  # arrives after that end was seen
        assert reader.step(0.0) == [task]  # c and the late record, then both ends

    assert committed(task, LABELS) == {b"x": b'"late"'}
    moves = changelog_moves(logs)
    assert moves[:4] == [
        (lb, "restoring", "at_end"),
        (lb, "at_end", "restoring"),
        (cl, "restoring", "at_end"),
        (lb, "restoring", "at_end"),
    ]
    assert sorted(moves[4:]) == [(cl, "at_end", "completed"), (lb, "at_end", "completed")]
    assert (
        metrics.registry.get_sample_value("worker_changelog_transitions_total", {"to": "completed"})
        == 2
    )


def test_a_standby_changelog_stays_updating_through_its_ends(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"))
    reader = reader_for(changelogs, metrics, batch=10)

    with capture_logs() as logs:
        reader.register(task, standby=True)
        for _ in range(3):
            assert reader.step(0.0) == []

    assert committed(task, COUNTS) == {b"a": b"1"}
    assert changelog_moves(logs) == []
    assert reader.lag(task.id) == 0


def test_key_value_stores_never_ask_for_their_changelog_tail(
    task: Task, changelogs: FakeRestoreConsumer, metrics: Metrics
) -> None:
    write(changelogs, CL, (b"a", b"1"))
    asked: list[object] = []
    reader = ChangelogReader(changelogs, metrics, 10, tail=asked.append)  # type: ignore[arg-type]
    reader.register(task)
    restore_all(reader)
    assert asked == []
    assert committed(task, COUNTS) == {b"a": b"1"}
