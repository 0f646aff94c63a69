"""One task on its own: open and lock, checkpoint migration, corruption, close, commit steps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from tests.fakes import FakeCollector, FakeMessage
from tests.support.restoring import restore_pairs
from tests.unit.tasks.conftest import (
    CHECKPOINT_INTERVAL_S,
    COUNTS,
    COUNTS_CHANGELOG,
    EVENTS,
    LABELS,
    T01,
    encode,
)
from worker.clock import FakeClock
from worker.errors import StateLocked, TaskCorrupted
from worker.events import TASK_TRANSITION
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.processing.handlers import RecordFailed
from worker.state.checkpoint import read_checkpoint, write_checkpoint
from worker.state.directory import StateDirectory
from worker.tasks.failures import RunFailed
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

CL = (COUNTS_CHANGELOG, 1)
LB = (LABELS, 1)
EV = (EVENTS, 1)


def new_task(ctx: TaskContext, topology: BuiltTopology) -> Task:
    return Task(T01, TaskRole.ACTIVE, topology.subtopologies[0], ctx)


@pytest.fixture
def task(ctx: TaskContext, topology: BuiltTopology) -> Iterator[Task]:
    created = new_task(ctx, topology)
    yield created
    created.close(clean=False)


def run(task: Task, committed: dict[tuple[str, int], int | None] | None = None) -> Task:
    """Open the task and take it to RUNNING the way the manager does."""
    task.open()
    task.transition(TaskState.RESTORING)
    task.transition(TaskState.RUNNING)
    task.start_positions(committed or {})
    return task


def event(offset: int, key: str, topic: str = EVENTS, value: object = None) -> FakeMessage:
    return FakeMessage(topic, 1, offset, key.encode(), encode(value if value is not None else {}))


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


# -- open ----------------------------------------------------------------------------


def test_a_task_knows_its_changelogs_and_source_partitions(task: Task) -> None:
    assert task.changelogs == {LABELS: LB, COUNTS: CL}
    assert task.source_partitions == (EV, LB)
    assert task.state is TaskState.CREATED


def test_open_locks_the_task_directory_and_opens_every_store(
    task: Task, state_dir: StateDirectory
) -> None:
    task.open()

    assert state_dir.task_lock_owner(T01) is task
    assert sorted(task.stores) == [COUNTS, LABELS]
    for name, store in task.stores.items():
        assert store.path == state_dir.store_path(T01, name)
        assert not store.closed


def test_open_raises_state_locked_while_another_owner_holds_the_directory(
    task: Task, state_dir: StateDirectory
) -> None:
    assert state_dir.lock_task(T01, "someone else")

    with pytest.raises(StateLocked, match="0_1"):
        task.open()
    assert task.stores == {}


def test_task_transitions_are_logged_with_task_id_and_role_bound(
    ctx: TaskContext, topology: BuiltTopology
) -> None:
    with capture_logs() as logs:
        task = new_task(ctx, topology)
        task.transition(TaskState.RESTORING, "assigned")

    (entry,) = [e for e in logs if e["event"] == TASK_TRANSITION]
    assert entry["task_id"] == "0_1"
    assert entry["role"] == "active"
    assert (entry["src"], entry["dst"], entry["reason"]) == ("created", "restoring", "assigned")


# -- checkpoint migration ------------------------------------------------------------


def test_checkpoint_offsets_move_into_stores_that_have_none(
    ctx: TaskContext, topology: BuiltTopology, state_dir: StateDirectory
) -> None:
    write_checkpoint(state_dir.checkpoint_path(T01), {CL: 17, LB: 5, ("other", 1): 99})
    first = new_task(ctx, topology)
    first.open()

    assert first.stores[COUNTS].committed_offsets() == {CL: 17}
    assert first.stores[LABELS].committed_offsets() == {LB: 5}
    assert first.restore_positions() == {CL: 18, LB: 6}
    first.close(clean=False)

    # The offsets now live in the stores themselves: the file is no longer needed.
    state_dir.checkpoint_path(T01).unlink()
    second = new_task(ctx, topology)
    second.open()
    try:
        assert second.restore_positions() == {CL: 18, LB: 6}
    finally:
        second.close(clean=False)


def test_a_store_with_its_own_offset_keeps_it_over_the_checkpoint(
    ctx: TaskContext, topology: BuiltTopology, state_dir: StateDirectory
) -> None:
    first = new_task(ctx, topology)
    first.open()
    first.stores[COUNTS].commit({CL: 30})
    first.close(clean=False)
    write_checkpoint(state_dir.checkpoint_path(T01), {CL: 17, LB: 5})

    second = new_task(ctx, topology)
    second.open()
    try:
        assert second.stores[COUNTS].committed_offsets() == {CL: 30}
        assert second.stores[LABELS].committed_offsets() == {LB: 5}
    finally:
        second.close(clean=False)


def test_an_unreadable_checkpoint_is_ignored_at_open(task: Task, state_dir: StateDirectory) -> None:
    state_dir.checkpoint_path(T01).write_text("not a checkpoint\n")

    task.open()

    assert task.restore_positions() == {CL: None, LB: None}


# -- corruption ----------------------------------------------------------------------


def test_a_corrupt_store_at_open_raises_task_corrupted_and_keeps_the_lock_for_the_wipe(
    ctx: TaskContext, topology: BuiltTopology, state_dir: StateDirectory, metrics: Metrics
) -> None:
    first = new_task(ctx, topology)
    first.open()
    first.stores[COUNTS].put(b"a", b"1")
    first.stores[COUNTS].commit({CL: 3})
    first.close(clean=True)
    (state_dir.store_path(T01, COUNTS) / "CURRENT").write_text("garbage\n")

    task = new_task(ctx, topology)
    with pytest.raises(TaskCorrupted) as raised:
        task.open()

    assert raised.value.task_ids == frozenset({T01})
    assert task.stores == {}
    assert state_dir.task_lock_owner(T01) is task

    task.transition(TaskState.CORRUPTED, raised.value.reason)
    task.wipe("corrupted_at_open")
    try:
        assert task.state is TaskState.WIPED
        assert task.stores[COUNTS].get(b"a") is None
        assert task.restore_positions() == {CL: None, LB: None}
        assert not state_dir.checkpoint_path(T01).exists()
        assert metric(metrics, "worker_state_wipes_total", reason="corrupted_at_open") == 1
    finally:
        task.close(clean=False)


# -- close ---------------------------------------------------------------------------


def test_clean_close_writes_the_checkpoint_and_releases_the_lock(
    task: Task, state_dir: StateDirectory, metrics: Metrics
) -> None:
    task.open()
    task.stores[COUNTS].commit({CL: 12})
    task.stores[LABELS].commit({LB: 4})

    task.close(clean=True)

    assert task.state is TaskState.CLOSED
    assert task.stores == {}
    assert read_checkpoint(state_dir.checkpoint_path(T01)) == {CL: 12, LB: 4}
    assert state_dir.task_lock_owner(T01) is None
    assert metric(metrics, "worker_checkpoint_writes_total") == 1


def test_dirty_close_writes_no_checkpoint_and_drops_uncommitted_writes(
    ctx: TaskContext, topology: BuiltTopology, state_dir: StateDirectory
) -> None:
    first = new_task(ctx, topology)
    first.open()
    first.stores[COUNTS].commit({CL: 12})
    first.stores[COUNTS].put(b"a", b"1")

    first.close(clean=False)

    assert not state_dir.checkpoint_path(T01).exists()
    assert state_dir.task_lock_owner(T01) is None
    second = new_task(ctx, topology)
    second.open()
    try:
        assert second.stores[COUNTS].get(b"a") is None
        assert second.stores[COUNTS].committed_offsets() == {CL: 12}
    finally:
        second.close(clean=False)


def test_close_is_idempotent(task: Task, metrics: Metrics) -> None:
    task.open()

    task.close(clean=True)
    task.close(clean=True)
    task.close(clean=False)

    assert task.state is TaskState.CLOSED
    assert metric(metrics, "worker_task_transitions_total", to="closed") == 1


# -- processing and the commit steps -------------------------------------------------


def test_produce_changelogs_sends_each_buffered_key_once_and_nothing_for_tables(
    task: Task, collector: FakeCollector
) -> None:
    run(task)
    for offset, key in enumerate(["a", "b", "a", "a"]):
        task.process_run([event(offset, key)], 0)
    task.process_run([event(0, "a", topic=LABELS, value="red")], 0)

    sent = task.produce_changelogs()

    assert sent == 2
    assert collector.changelog_for(COUNTS_CHANGELOG, 1) == [(b"a", b"3"), (b"b", b"1")]
    assert collector.changelog_for(LABELS, 1) == []
    assert [r.value for r in collector.sent] == [
        b'{"n":1,"label":null}',
        b'{"n":1,"label":null}',
        b'{"n":2,"label":null}',
        b'{"n":3,"label":null}',
    ]


def test_process_run_takes_the_records_of_one_partition_and_stops_where_the_next_begins(
    task: Task, collector: FakeCollector
) -> None:
    run(task)
    batch = [
        event(0, "a", topic=LABELS, value="red"),
        event(4, "a"),
        event(5, "b"),
        event(6, "a"),
        event(1, "b", topic=LABELS, value="blue"),
    ]

    assert task.process_run(batch, 1) == 4
    assert task.source_offsets_to_commit() == {EV: 7}
    assert [r.value for r in collector.sent] == [
        b'{"n":1,"label":null}',
        b'{"n":1,"label":null}',
        b'{"n":2,"label":null}',
    ]
    assert task.process_run(batch, 4) == 5
    assert task.source_offsets_to_commit() == {EV: 7, LB: 2}


def test_a_failing_record_ends_the_run_with_its_index_and_the_records_before_it_consumed(
    task: Task, collector: FakeCollector
) -> None:
    run(task)
    batch = [
        event(4, "a"),
        event(5, "b"),
        FakeMessage(EVENTS, 1, 6, b"c", b"{not json"),
        event(7, "d"),
    ]

    with pytest.raises(RunFailed) as raised:
        task.process_run(batch, 0)

    assert (raised.value.index, raised.value.record) == (2, batch[2])
    assert isinstance(raised.value.error, RecordFailed), (
        "default.deserialization.exception.handler = fail"
    )
    assert "JSON" in str(raised.value.error) or "json" in str(raised.value.error)
    assert task.source_offsets_to_commit() == {EV: 6}
    assert len(collector.sent) == 2


def test_commit_stores_uses_the_acked_offset_for_stores_and_the_consumed_one_for_tables(
    task: Task,
) -> None:
    run(task)
    task.process_run([event(7, "a")], 0)
    task.process_run([event(3, "a", topic=LABELS, value="red")], 0)
    task.produce_changelogs()  # step 1 of the protocol: the store's changelog is written

    task.commit_stores({CL: 41, ("elsewhere", 0): 5})

    assert task.stores[COUNTS].committed_offsets() == {CL: 41}
    assert task.stores[COUNTS].get_committed(b"a") == b"1"
    assert task.stores[LABELS].committed_offsets() == {LB: 3}
    assert task.stores[LABELS].get_committed(b"a") == b'"red"'


def test_source_offsets_to_commit_are_next_offsets_of_the_partitions_that_moved(
    task: Task,
) -> None:
    run(task, committed={EV: 5, LB: None})
    assert task.source_offsets_to_commit() == {}
    assert not task.needs_commit()

    task.process_run([event(5, "a")], 0)
    task.process_run([event(6, "b")], 0)

    assert task.needs_commit()
    assert task.source_offsets_to_commit() == {EV: 7}
    task.mark_sources_committed({EV: 7})
    assert task.source_offsets_to_commit() == {}


def test_discard_uncommitted_drops_buffered_writes_and_consumed_positions(task: Task) -> None:
    run(task)
    task.process_run([event(0, "a")], 0)
    assert task.pending_bytes > 0

    task.discard_uncommitted()

    assert task.pending_bytes == 0
    assert task.source_offsets_to_commit() == {}
    assert not task.needs_commit()


def test_checkpoint_is_rewritten_only_once_its_interval_has_passed(
    task: Task, state_dir: StateDirectory, clock: FakeClock
) -> None:
    run(task)
    task.stores[COUNTS].commit({CL: 1})
    path = state_dir.checkpoint_path(T01)

    clock.advance(CHECKPOINT_INTERVAL_S - 0.001)
    task.maybe_write_checkpoint()
    assert not path.exists()

    clock.advance(0.001)
    task.maybe_write_checkpoint()
    assert read_checkpoint(path) == {CL: 1}

    task.stores[COUNTS].commit({CL: 2})
    clock.advance(CHECKPOINT_INTERVAL_S / 2)
    task.maybe_write_checkpoint()
    assert read_checkpoint(path) == {CL: 1}


def test_a_table_feeding_no_processor_resumes_after_what_its_store_holds(task: Task) -> None:
    task.open()
    restore_pairs(task.stores[LABELS], [(b"a", b'"red"')], {LB: 9})  # restored to offset 9

    positions = task.start_positions({EV: 4, LB: 2})

    assert positions == {EV: 4, LB: 10}, "records 2..9 of the table are already applied"
    assert task.start_positions({EV: 4, LB: 12}) == {EV: 4, LB: 12}


def test_a_stream_source_always_resumes_at_the_committed_offset(task: Task) -> None:
    task.open()
    assert task.start_positions({EV: None, LB: None}) == {EV: None, LB: None}


def test_a_revived_task_never_resumes_before_what_it_committed_itself(task: Task) -> None:
    run(task, {EV: 4})
    task.process_run([event(9, "a")], 0)
    task.mark_sources_committed(task.source_offsets_to_commit())  # committed: next is 10
    task.discard_uncommitted()  # revived

    # The broker answers with the offsets from before that commit (on Kafka: a fetch
    # without require_stable before the transaction's offsets are materialised).
    assert task.start_positions({EV: 4, LB: None})[EV] == 10
    assert task.start_positions({EV: None, LB: None})[EV] == 10
    assert task.start_positions({EV: 12, LB: None})[EV] == 12, "a newer answer wins"
