"""The task manager: the at-least-once commit protocol, assignments, corruption, offset sums.

Real state directory and RocksDB stores on ``tmp_path``; Kafka is the fakes (see conftest).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.fakes import FakeMessage
from tests.unit.tasks.conftest import (
    CHECKPOINT_INTERVAL_S,
    COUNTS,
    COUNTS_CHANGELOG,
    EVENTS,
    LABELS,
    OUT,
    T00,
    T01,
    T02,
    Harness,
    assignment,
    encode,
)
from worker.assignment.model import Assignment
from worker.assignment.task_id import TP, TaskId
from worker.errors import ProduceFailed
from worker.state.checkpoint import read_checkpoint, write_checkpoint
from worker.tasks.state import TaskState
from worker.tasks.task import Task


def cl(task_id: TaskId) -> TP:
    return (COUNTS_CHANGELOG, task_id.partition)


def ev(task_id: TaskId) -> TP:
    return (EVENTS, task_id.partition)


def lb(task_id: TaskId) -> TP:
    return (LABELS, task_id.partition)


def running(h: Harness, *task_ids: TaskId) -> list[Task]:
    h.assign(*task_ids)
    h.restore()
    tasks = [h.manager.tasks[t] for t in task_ids]
    assert all(t.state is TaskState.RUNNING for t in tasks)
    return tasks


def rebalance(h: Harness, *task_ids: TaskId) -> None:
    """A new assignment (cooperative: nothing is revoked ahead of it): ``task_ids``."""
    h.manager.on_assigned(assignment(*task_ids))


def events(h: Harness, task_id: TaskId, *keys: str) -> None:
    for key in keys:
        h.event(task_id, key)
    h.process()


# -- the commit protocol -------------------------------------------------------------


def test_commit_produces_buffered_store_changes_collapsed_per_key(harness: Harness) -> None:
    running(harness, T01)
    events(harness, T01, "a", "b", "a", "a")

    assert harness.commits.commit()

    assert harness.collector.changelog_for(COUNTS_CHANGELOG, 1) == [(b"a", b"3"), (b"b", b"1")]
    assert [(r.topic, r.key) for r in harness.collector.sent] == [
        (OUT, b"a"),
        (OUT, b"b"),
        (OUT, b"a"),
        (OUT, b"a"),
    ]


def test_commit_steps_run_in_order_produce_flush_write_stores_commit_sources(
    harness: Harness,
) -> None:
    (task,) = running(harness, T01)
    events(harness, T01, "a")
    store = task.stores[COUNTS]
    seen: dict[str, Any] = {}

    def at_flush() -> None:
        seen["flush"] = (
            len(harness.collector.changelog),
            store.get_committed(b"a"),
            store.committed_offsets(),
        )

    def at_source_commit(offsets: Mapping[TP, int]) -> None:
        seen["commit"] = (store.get_committed(b"a"), store.committed_offsets(), dict(offsets))

    harness.collector.before_flush = at_flush
    harness.group_offsets.before_commit = at_source_commit

    harness.commits.commit()

    # 1-2: the changelog record and the stream-time marker after it were produced before
    # the flush; no store was written yet.
    assert seen["flush"] == (2, None, {})
    # 3-4: the store holds the data and its acked offset (the marker's) before the sources
    # are committed.
    assert seen["commit"] == (b"1", {cl(T01): 1}, {ev(T01): 1})


def test_each_store_is_committed_with_its_acked_changelog_offset(harness: Harness) -> None:
    harness.collector.next_offsets[cl(T01)] = 40
    (task,) = running(harness, T01)
    events(harness, T01, "a", "b")

    harness.commits.commit()

    # Two changes (40, 41) and the stream-time marker (42).
    assert harness.collector.acked == {cl(T01): 42}
    assert task.stores[COUNTS].committed_offsets() == {cl(T01): 42}
    assert task.stores[COUNTS].get_committed(b"b") == b"1"


def test_a_table_store_is_committed_with_its_consumed_source_offset(harness: Harness) -> None:
    (task,) = running(harness, T01)
    harness.consumer.append(LABELS, 1, b"a", encode("red"))
    harness.consumer.append(LABELS, 1, b"b", encode("blue"))
    harness.process()

    harness.commits.commit()

    assert task.stores[LABELS].committed_offsets() == {lb(T01): 1}
    assert task.stores[LABELS].get_committed(b"b") == b'"blue"'
    assert harness.collector.changelog_for(LABELS, 1) == []  # its topic is its changelog


def test_source_offsets_are_committed_through_the_committer_as_next_offsets(
    harness: Harness,
) -> None:
    running(harness, T00, T01)
    events(harness, T00, "a", "b", "c")
    events(harness, T01, "a")
    harness.consumer.append(LABELS, 1, b"a", encode("red"))
    harness.process()

    harness.commits.commit()

    assert harness.group_offsets.commits == [{ev(T00): 3, ev(T01): 1, lb(T01): 1}]


def test_a_failing_flush_revives_the_tasks_from_their_last_committed_state(
    harness: Harness,
) -> None:
    (task,) = running(harness, T01)
    events(harness, T01, "a")
    harness.collector.fail_flush = ProduceFailed("1 records not acknowledged")

    assert not harness.commits.commit()

    store = task.stores[COUNTS]
    assert store.get_committed(b"a") is None
    assert store.committed_offsets() == {}
    assert harness.group_offsets.commits == []
    assert dict(store.pending()) == {}, "uncommitted work dropped: it is reprocessed"
    assert task.state is TaskState.RESTORING
    assert harness.metric("worker_task_revivals_total", reason="produce_failed") == 1

    harness.collector.fail_flush = None
    harness.restore()
    harness.process()  # the same input again, from the committed source offset
    assert harness.commits.commit()
    assert store.get_committed(b"a") == b"1"
    assert harness.group_offsets.commits == [{ev(T01): 1}]


def test_commit_with_nothing_to_commit_does_nothing(harness: Harness) -> None:
    running(harness, T01)
    events(harness, T01, "a")
    assert harness.commits.commit()
    flushes = harness.collector.flushes

    assert not harness.commits.commit()

    assert harness.collector.flushes == flushes
    assert len(harness.group_offsets.commits) == 1
    assert harness.metric("worker_commits_total", result="committed") == 1


def test_commit_writes_the_checkpoint_only_after_the_checkpoint_interval(
    harness: Harness,
) -> None:
    running(harness, T01)
    path = harness.state_dir.checkpoint_path(T01)

    events(harness, T01, "a")
    harness.commits.commit()
    harness.clock.advance(CHECKPOINT_INTERVAL_S - 1)
    events(harness, T01, "a")
    harness.commits.commit()
    assert not path.exists()

    harness.clock.advance(1)
    events(harness, T01, "a")
    harness.commits.commit()
    # a, the stream-time marker (stream time 0 from then on: no other), a, a.
    assert read_checkpoint(path) == {cl(T01): 3}
    assert harness.metric("worker_checkpoint_writes_total") == 1

    events(harness, T01, "b")
    harness.commits.commit()
    assert read_checkpoint(path) == {cl(T01): 3}


def test_a_commit_never_moves_a_stores_changelog_offset_backwards(harness: Harness) -> None:
    # This process wrote the changelog up to offset 2 (a, b, the stream-time marker) while
    # it owned the task...
    running(harness, T01)
    events(harness, T01, "a", "b")
    harness.commits.commit()
    harness.replicate_changelogs()
    rebalance(harness)
    # ...then another instance owned it and wrote offsets 3 and 4...
    harness.restore_consumer.append(COUNTS_CHANGELOG, 1, b"a", b"7")
    harness.restore_consumer.append(COUNTS_CHANGELOG, 1, b"c", b"1")
    harness.collector.next_offsets[cl(T01)] = 5
    # ...and now it is back here, restored to offset 4.
    rebalance(harness, T01)
    harness.restore()
    task = harness.manager.tasks[T01]
    assert task.stores[COUNTS].committed_offsets() == {cl(T01): 4}

    # A commit in which the store wrote nothing (only the table moved).
    harness.consumer.append(LABELS, 1, b"a", encode("red"))
    harness.process()
    harness.commits.commit()

    assert task.stores[COUNTS].get_committed(b"a") == b"7"
    assert task.stores[COUNTS].committed_offsets() == {cl(T01): 4}


# -- processing ----------------------------------------------------------------------


def test_records_are_routed_to_their_task_and_counted(harness: Harness) -> None:
    t0, t1 = running(harness, T00, T01)
    harness.event(T00, "a")
    harness.event(T01, "a")
    harness.event(T01, "b")

    assert harness.process() == 3

    assert dict(t0.stores[COUNTS].pending()) == {b"a": b"1"}
    assert dict(t1.stores[COUNTS].pending()) == {b"a": b"1", b"b": b"1"}
    assert harness.metric("worker_processed_records_total") == 3


@pytest.mark.parametrize("idle_ms", [-1])  # a batch of the test's own: no fetch ends
def test_interleaved_runs_of_partitions_commit_each_partitions_last_offset(
    harness: Harness,
) -> None:
    t0, t1 = running(harness, T00, T01)
    batch = [
        FakeMessage(EVENTS, 0, 0, b"a", b"{}"),
        FakeMessage(EVENTS, 1, 0, b"a", b"{}"),
        FakeMessage(EVENTS, 1, 1, b"b", b"{}"),
        FakeMessage(EVENTS, 0, 1, b"a", b"{}"),
        FakeMessage(LABELS, 1, 0, b"a", encode("red")),
        FakeMessage(EVENTS, 0, 2, b"c", b"{}"),
        FakeMessage(EVENTS, 1, 2, b"b", b"{}"),
    ]

    assert harness.router.process(batch) == 7
    assert harness.commits.commit()

    assert harness.group_offsets.commits == [{ev(T00): 3, ev(T01): 3, lb(T01): 1}]
    assert t0.stores[COUNTS].get_committed(b"a") == b"2"
    assert t1.stores[COUNTS].get_committed(b"b") == b"2"
    assert t1.stores[LABELS].committed_offsets() == {lb(T01): 0}


def test_records_of_partitions_no_running_task_owns_are_dropped(harness: Harness) -> None:
    running(harness, T01)

    processed = harness.router.process([FakeMessage(EVENTS, 5, 0, b"a", b"{}")])

    assert processed == 0
    assert harness.metric("worker_processed_records_total") == 0


def test_processing_resumes_from_the_groups_committed_offsets(harness: Harness) -> None:
    harness.group_offsets.offsets[ev(T01)] = 7

    running(harness, T01)

    assert harness.consumer.added[-1] == {ev(T01): 7, lb(T01): None}
    assert harness.consumer.assigned == {ev(T01), lb(T01)}


# -- corruption at open --------------------------------------------------------------


def corrupt_counts_store_of(h: Harness, task_id: TaskId) -> None:
    """Leave ``task_id``'s directory with committed state, then damage its counts store."""
    running(h, task_id)
    events(h, task_id, "a", "a", "b")
    h.commits.commit()
    h.replicate_changelogs()
    rebalance(h)
    assert h.state_dir.checkpoint_path(task_id).exists()
    (h.state_dir.store_path(task_id, COUNTS) / "CURRENT").write_text("garbage\n")


def test_a_task_with_a_corrupt_store_at_open_is_wiped_counted_and_restored(
    harness: Harness,
) -> None:
    corrupt_counts_store_of(harness, T01)

    harness.assign(T01)

    task = harness.manager.tasks[T01]
    assert task.state is TaskState.RESTORING
    assert harness.metric("worker_state_wipes_total", reason="corrupt_store") == 1
    assert harness.metric("worker_task_transitions_total", to="corrupted") == 1
    assert harness.metric("worker_task_transitions_total", to="wiped") == 1
    assert not harness.state_dir.checkpoint_path(T01).exists()
    assert harness.restore_consumer.added[-1] == {cl(T01): None, lb(T01): None}

    harness.restore()

    assert task.state is TaskState.RUNNING
    assert task.stores[COUNTS].get_committed(b"a") == b"2"
    assert task.stores[COUNTS].committed_offsets() == {cl(T01): 2}, "a, b, stream-time marker"


def test_a_task_wiped_at_open_processes_records_once_restored(harness: Harness) -> None:
    corrupt_counts_store_of(harness, T01)
    harness.assign(T01)
    harness.restore()

    events(harness, T01, "a")

    assert dict(harness.manager.tasks[T01].stores[COUNTS].pending()) == {b"a": b"3"}


# -- rebalances ----------------------------------------------------------------------


def test_a_revoked_active_is_committed_and_closed_while_a_kept_one_runs_on_untouched(
    harness: Harness,
) -> None:
    t0, t1 = running(harness, T00, T01)
    events(harness, T00, "a", "b")
    events(harness, T01, "c")
    transitions = harness.metric("worker_task_transitions_total", to="suspended")
    added = len(harness.consumer.added)

    rebalance(harness, T01, T02)

    # Revoked: committed first (with everything else running), then closed cleanly.
    assert harness.group_offsets.commits == [{ev(T00): 2, ev(T01): 1}]
    assert T00 not in harness.manager.tasks
    assert t0.state is TaskState.CLOSED
    # Two changes (offsets 0 and 1), its stream-time marker (2), then its release marker
    # (3): the store is at the release marker.
    assert read_checkpoint(harness.state_dir.checkpoint_path(T00)) == {cl(T00): 3}
    assert harness.state_dir.task_lock_owner(T00) is None
    # Kept: the same task object, never suspended, its input never re-assigned.
    assert harness.manager.tasks[T01] is t1
    assert t1.state is TaskState.RUNNING
    assert harness.metric("worker_task_transitions_total", to="suspended") == transitions + 1
    assert harness.consumer.assigned == {ev(T01), lb(T01)}
    assert len(harness.consumer.added) == added, "the kept task's input was not touched"
    events(harness, T01, "c")
    assert dict(t1.stores[COUNTS].pending()) == {b"c": b"2"}
    # New: created and restoring.
    assert harness.manager.tasks[T02].state is TaskState.RESTORING
    assert harness.restore_consumer.assigned == {cl(T02), lb(T02)}
    assert harness.metric("worker_tasks", kind="active") == 2


def test_an_assignment_that_keeps_every_task_commits_nothing_and_stops_nothing(
    harness: Harness,
) -> None:
    (task,) = running(harness, T01)
    events(harness, T01, "a")

    rebalance(harness, T01)

    assert harness.group_offsets.commits == []
    assert task.state is TaskState.RUNNING
    assert dict(task.stores[COUNTS].pending()) == {b"a": b"1"}, "uncommitted work kept"


def test_a_kept_task_that_is_restoring_keeps_restoring(harness: Harness) -> None:
    harness.assign(T01)
    task = harness.manager.tasks[T01]
    rebalance(harness, T01)

    assert harness.manager.tasks[T01] is task
    assert task.state is TaskState.RESTORING
    assert harness.restore_consumer.assigned == {cl(T01), lb(T01)}
    assert harness.consumer.assigned == frozenset()


def test_close_all_closes_every_task_cleanly_with_checkpoints(harness: Harness) -> None:
    t0, t1 = running(harness, T00, T01)
    events(harness, T00, "a")
    harness.commits.commit()

    harness.manager.close_all(clean=True)

    assert harness.manager.tasks == {}
    assert (t0.state, t1.state) == (TaskState.CLOSED, TaskState.CLOSED)
    assert read_checkpoint(harness.state_dir.checkpoint_path(T00)) == {cl(T00): 1}, "a, marker"
    assert harness.state_dir.task_lock_owner(T00) is None
    assert harness.metric("worker_tasks", kind="active") == 0


def test_losing_the_group_closes_actives_dirty_and_keeps_standbys(harness: Harness) -> None:
    (task,) = running(harness, T01)
    harness.manager.on_assigned(
        Assignment(frozenset({T01}), frozenset({T02}), frozenset(), {}, {}, generation=2)
    )
    events(harness, T01, "a")

    harness.manager.on_lost()

    assert task.state is TaskState.CLOSED
    assert harness.group_offsets.commits == []
    assert not harness.state_dir.checkpoint_path(T01).exists()
    assert set(harness.manager.tasks) == {T02}
    assert harness.manager.tasks[T02].state is TaskState.RUNNING


# -- offset sums ---------------------------------------------------------------------


def test_offset_sums_report_positions_of_running_restoring_and_unopened_tasks(
    harness: Harness,
) -> None:
    sd = harness.state_dir
    # An unopened directory with state: reported from its .checkpoint.
    write_checkpoint(sd.checkpoint_path(T00), {cl(T00): 7, lb(T00): 3})
    (sd.store_path(T00, COUNTS)).mkdir(parents=True)
    # A directory holding only a .checkpoint has no state: not reported.
    write_checkpoint(sd.checkpoint_path(TaskId(0, 3)), {(COUNTS_CHANGELOG, 3): 50})
    # A restoring task: reported from its stores (here: offsets migrated from a checkpoint).
    write_checkpoint(sd.checkpoint_path(T02), {cl(T02): 20, lb(T02): 4})
    # ...of changelogs that really are that long (shorter ones would mean another history).
    harness.restore_consumer.skip_offsets(COUNTS_CHANGELOG, 2, 21)
    harness.restore_consumer.skip_offsets(LABELS, 2, 5)
    running(harness, T01)
    rebalance(harness, T01, T02)
    assert harness.manager.tasks[T02].state is TaskState.RESTORING

    # Positions (stored offset + 1) summed per task, for every role; T01 runs with no
    # changelog offsets yet; the leader knows it is a running active from prev_active.
    assert harness.manager.offset_sums() == {T01: 0, T02: 26, T00: 12}


def test_offset_sums_skip_unopened_directories_with_an_unreadable_checkpoint(
    harness: Harness,
) -> None:
    sd = harness.state_dir
    sd.checkpoint_path(T00).write_text("garbage")
    (sd.store_path(T00, COUNTS)).mkdir(parents=True)

    assert harness.manager.offset_sums() == {}
