"""Initial standbys: state on disk opened before the join, recycled or closed on the first assignment."""

from __future__ import annotations

import os

from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.state.checkpoint import write_checkpoint
from worker.tasks.state import TaskRole, TaskState

from .conftest import COUNTS, COUNTS_CHANGELOG, Harness, encode

T0, T1, T2 = TaskId(0, 0), TaskId(0, 1), TaskId(0, 2)
PARTITIONS = {0: 4}


def roles(active=(), standby=(), warmup=()) -> Assignment:
    return Assignment(
        frozenset(active), frozenset(standby), frozenset(warmup), {}, {}, generation=1
    )


def leave_state_on_disk(h: Harness, *task_ids: TaskId) -> None:
    """A previous run: each task processed one record, committed and closed cleanly."""
    h.manager.on_assigned(roles(active=task_ids))
    h.restore()
    for task_id in task_ids:
        h.event(task_id, "k")
    h.process()
    h.commits.commit()
    h.replicate_changelogs()
    h.manager.close_all(clean=True)


def test_every_non_empty_task_directory_becomes_an_initial_standby(harness: Harness) -> None:
    leave_state_on_disk(harness, T0, T1)

    harness.manager.open_initial_standbys(harness.state_dir.list_non_empty_task_ids(), PARTITIONS)

    tasks = harness.manager.tasks
    assert set(tasks) == {T0, T1}
    assert all(
        t.role is TaskRole.INITIAL_STANDBY and t.state is TaskState.CREATED for t in tasks.values()
    )
    assert harness.metric("worker_initial_standbys_created_total") == 2
    assert harness.metric("worker_tasks", kind="initial_standby") == 2
    # The first subscription reports their positions (offset + 1) from the open stores.
    assert harness.manager.offset_sums()[T0] > 0
    assert harness.manager.tasks_by_role(TaskRole.INITIAL_STANDBY) == {T0, T1}


def test_the_first_assignment_recycles_assigned_ones_and_closes_the_rest(harness: Harness) -> None:
    leave_state_on_disk(harness, T0, T1, T2)
    harness.manager.open_initial_standbys(harness.state_dir.list_non_empty_task_ids(), PARTITIONS)
    before = {tid: t.stores[COUNTS] for tid, t in harness.manager.tasks.items()}

    harness.manager.on_assigned(roles(active=[T0], standby=[T1]))

    tasks = harness.manager.tasks
    assert set(tasks) == {T0, T1}
    assert tasks[T0].stores[COUNTS] is before[T0], "recycled: the open store is reused"
    assert tasks[T0].role is TaskRole.ACTIVE and tasks[T0].state is TaskState.RESTORING
    assert tasks[T1].role is TaskRole.STANDBY and tasks[T1].state is TaskState.RUNNING
    assert before[T2].closed
    assert harness.state_dir.task_lock_owner(T2) is None, "the closed one's lock is released"
    assert harness.metric("worker_initial_standbys_recycled_total", into="active") == 1
    assert harness.metric("worker_initial_standbys_recycled_total", into="standby") == 1
    assert harness.metric("worker_initial_standbys_closed_total") == 1
    harness.restore()
    assert harness.metric("worker_restored_records_total", task="0_0", store=COUNTS) == 0


def test_a_corrupt_store_is_wiped_at_start_up_and_the_others_are_untouched(
    harness: Harness,
) -> None:
    leave_state_on_disk(harness, T0, T1)
    current = harness.state_dir.store_path(T1, COUNTS) / "CURRENT"
    current.write_bytes(b"garbage\n")

    harness.manager.open_initial_standbys(harness.state_dir.list_non_empty_task_ids(), PARTITIONS)

    assert harness.manager.tasks[T1].state is TaskState.WIPED
    assert harness.manager.tasks[T1].stored_offsets() == {}
    assert harness.manager.tasks[T0].state is TaskState.CREATED
    assert harness.manager.tasks[T0].stored_offsets() != {}
    assert harness.metric("worker_state_wipes_total", reason="corrupt_store") == 1

    harness.manager.on_assigned(roles(active=[T0, T1]))
    harness.restore()
    assert harness.manager.tasks[T1].stores[COUNTS].get_committed(b"k") == encode(1)


def test_offsets_beyond_the_changelog_end_mean_another_history_and_are_wiped(
    harness: Harness,
) -> None:
    leave_state_on_disk(harness, T0)
    # The same directory, but the changelog it came from is gone (a new, shorter topic).
    harness.restore_consumer.logs.clear()
    harness.restore_consumer.high_watermarks.clear()

    harness.manager.open_initial_standbys([T0], PARTITIONS)

    assert harness.manager.tasks[T0].state is TaskState.WIPED
    assert harness.metric("worker_state_wipes_total", reason="offset_beyond_changelog_end") == 1


def test_offsets_only_in_an_old_checkpoint_are_migrated_into_the_stores(harness: Harness) -> None:
    store_dir = harness.state_dir.store_path(T0, COUNTS)
    store_dir.mkdir(parents=True)
    harness.restore_consumer.skip_offsets(COUNTS_CHANGELOG, 0, 10)
    write_checkpoint(harness.state_dir.checkpoint_path(T0), {(COUNTS_CHANGELOG, 0): 4})
    (harness.state_dir.task_dir(T0) / "marker").write_text("non-empty")

    harness.manager.open_initial_standbys([T0], PARTITIONS)

    assert harness.manager.tasks[T0].stored_offsets() == {(COUNTS_CHANGELOG, 0): 4}


def test_directories_of_partitions_the_topology_no_longer_has_are_left_alone(
    harness: Harness,
) -> None:
    harness.state_dir.task_dir(TaskId(0, 9))
    (harness.state_dir.task_dir(TaskId(0, 9)) / "x").write_text("x")

    harness.manager.open_initial_standbys([TaskId(0, 9)], PARTITIONS)

    assert harness.manager.tasks == {}
    assert harness.metric("worker_initial_standbys_created_total") == 0


def test_the_cleaner_waits_for_the_first_assignment_then_removes_expired_unowned_dirs(
    harness: Harness,
) -> None:
    leave_state_on_disk(harness, T0, T1)
    harness.manager.open_initial_standbys([T0, T1], PARTITIONS)
    for task_id in (T0, T1):  # long untouched, as the state dir's clock sees it
        os.utime(harness.state_dir.task_dir(task_id), (0, 0))
    harness.manager.clean_state_dir()
    assert set(harness.state_dir.list_task_ids()) == {T0, T1}, "nothing before the assignment"

    harness.manager.on_assigned(roles(active=[T0]))
    os.utime(harness.state_dir.task_dir(T1), (0, 0))  # closed long ago
    harness.manager.clean_state_dir()

    assert set(harness.state_dir.list_task_ids()) == {T0}, "owned T0 stays, unowned T1 goes"
