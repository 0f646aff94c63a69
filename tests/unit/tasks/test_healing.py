"""Corruption found at run time: the task is wiped and restored, the others go on.

RocksDB finds a corrupt block only when it reads it. Here a store's RocksDB reads (or
writes) are made to fail as they would on such a block (StoreCorrupted, as
``rocksdb_errors.py`` classifies it); the harness of conftest.py does the rest with real
RocksDB and fake Kafka.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.tasks.conftest import (
    CHECKPOINT_INTERVAL_S,
    COUNTS,
    T00,
    T01,
    Harness,
    assignment,
    make_harness,
)
from tests.unit.tasks.test_processing_failures import AbortingProtocol
from tests.unit.tasks.test_task_manager import cl, events, running
from worker.assignment.model import Assignment
from worker.errors import StoreCorrupted
from worker.processing.built_topology import BuiltTopology
from worker.state.store import Store, StoreClosedError, StoreHealing
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task_context import TaskContext

BLOCK = "block checksum mismatch"


def failing(store: Store, method: str, times: int = -1) -> list[int]:
    """Make ``store.<method>`` raise StoreCorrupted ``times`` times (-1: always); the
    read cache is emptied so that reads reach RocksDB. Returns the call count."""
    real: Callable[..., Any] = getattr(store, method)
    calls = [0]

    def fail(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if times < 0 or calls[0] <= times:
            raise StoreCorrupted(str(store.path), f"Corruption: {BLOCK}")
        return real(*args, **kwargs)

    setattr(store, method, fail)
    store._cache.clear()
    return calls


def committed_state(h: Harness) -> None:
    """T00 and T01 running, each with committed counts (a: 2, b: 1) in its changelog."""
    running(h, T00, T01)
    for task_id in (T00, T01):
        events(h, task_id, "a", "a", "b")
    h.commits.commit()
    h.replicate_changelogs()


def count_of(h: Harness, task_id: Any, key: bytes) -> bytes | None:
    return h.manager.tasks[task_id].stores[COUNTS].get_committed(key)


def rebalanced(h: Harness) -> None:
    """The assignment the healer's rebalance brings: both tasks active here again (the
    healed one recycled from the standby it became), then restored."""
    h.assign(T00, T01)
    h.restore()


def test_a_record_that_reads_a_corrupt_block_heals_its_task_and_the_others_go_on(
    harness: Harness,
) -> None:
    committed_state(harness)
    failing(harness.manager.tasks[T01].stores[COUNTS], "_read_committed")

    events(harness, T01, "a")
    events(harness, T00, "a")

    healed = harness.manager.tasks[T01]
    assert healed.role is TaskRole.STANDBY and healed.state is TaskState.RUNNING
    assert harness.manager.tasks_by_role(TaskRole.ACTIVE) == {T00}, "T01 claimed by nobody"
    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    assert harness.manager.tasks[T00].state is TaskState.RUNNING
    assert dict(harness.manager.tasks[T00].stores[COUNTS].pending()) == {b"a": b"3"}
    assert harness.restore_consumer.added[-1][cl(T01)] is None, "tailed from the start"

    rebalanced(harness)

    assert healed.is_active and healed.state is TaskState.RUNNING
    assert count_of(harness, T01, b"a") == b"2"
    harness.process()  # the record that met the corrupt block, again
    assert dict(healed.stores[COUNTS].pending()) == {b"a": b"3"}


def test_a_query_that_reads_a_corrupt_block_answers_healing_and_the_loop_heals_the_task(
    harness: Harness,
) -> None:
    committed_state(harness)
    store = harness.manager.tasks[T01].stores[COUNTS]
    failing(store, "_read_committed")

    with pytest.raises(StoreHealing) as raised:
        store.get_committed(b"a")
    assert isinstance(raised.value, StoreClosedError), "a query retries it, then answers 503"
    assert harness.manager.tasks[T01].state is TaskState.RUNNING, "healed on the loop's thread"

    harness.parts.healer.heal_reported()

    assert harness.manager.tasks[T01].role is TaskRole.STANDBY
    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    with pytest.raises(StoreClosedError):
        store.get_committed(b"a")
    rebalanced(harness)
    assert count_of(harness, T01, b"a") == b"2"
    assert harness.manager.tasks[T00].state is TaskState.RUNNING


def test_a_restore_batch_that_meets_corruption_restarts_the_restore_from_a_wiped_store(
    harness: Harness,
) -> None:
    committed_state(harness)
    harness.manager.on_lost()  # closed dirty; T01 starts over from an empty store
    shutil.rmtree(harness.state_dir.store_path(T01, COUNTS))
    harness.assign(T00, T01)
    failing(harness.manager.tasks[T01].stores[COUNTS], "write_restored", times=1)

    harness.tasks.restore_step(timeout=0.0)
    assert harness.manager.tasks[T01].state is TaskState.RESTORING, "not finished while corrupt"
    harness.parts.healer.heal_reported()

    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    rebalanced(harness)
    assert harness.manager.tasks[T01].state is TaskState.RUNNING
    assert count_of(harness, T01, b"a") == b"2"
    assert count_of(harness, T00, b"a") == b"2"


def test_a_commit_that_meets_corruption_commits_the_others_and_heals_from_the_changelog(
    harness: Harness,
) -> None:
    committed_state(harness)
    for task_id in (T00, T01):
        events(harness, task_id, "b")
    failing(harness.manager.tasks[T01].stores[COUNTS], "commit", times=1)

    assert harness.commits.commit()
    harness.replicate_changelogs()
    assert count_of(harness, T00, b"b") == b"2"
    harness.parts.healer.heal_reported()
    rebalanced(harness)

    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    assert count_of(harness, T01, b"b") == b"2", "the acknowledged changelog record restored"
    assert harness.manager.tasks[T00].state is TaskState.RUNNING


def test_a_report_for_a_task_closed_since_heals_nothing(harness: Harness) -> None:
    committed_state(harness)
    harness.ctx.corruption.report(T01, BLOCK)
    harness.manager.on_assigned(assignment(T00))

    harness.parts.healer.heal_reported()

    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 0


def test_under_exactly_once_the_open_transaction_is_aborted_and_the_others_revived(
    topology: BuiltTopology, ctx: TaskContext
) -> None:
    protocol = AbortingProtocol()
    h = make_harness(topology, ctx, protocol)
    healthy, corrupted = running(h, T00, T01)
    events(h, T00, "a")
    failing(corrupted.stores[COUNTS], "_read_committed")

    events(h, T01, "b")

    assert protocol.aborts == 1
    assert corrupted.role is TaskRole.STANDBY
    assert healthy.state is TaskState.RESTORING, "its output since the commit was aborted"
    assert dict(healthy.stores[COUNTS].pending()) == {}
    assert h.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    assert h.metric("worker_task_revivals_total", reason="corrupt_read") == 1
    h.manager.close_all(clean=False)


def test_a_checkpoint_flush_that_meets_corruption_heals_the_task(harness: Harness) -> None:
    committed_state(harness)
    events(harness, T01, "b")
    failing(harness.manager.tasks[T01].stores[COUNTS], "flush")
    harness.clock.advance(CHECKPOINT_INTERVAL_S + 1)

    assert harness.commits.commit(), "the commit itself went through"
    harness.replicate_changelogs()
    harness.parts.healer.heal_reported()
    rebalanced(harness)

    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    assert count_of(harness, T01, b"b") == b"2"


def test_a_standby_whose_update_meets_corruption_tails_again_from_a_wiped_store(
    harness: Harness,
) -> None:
    committed_state(harness)
    harness.manager.on_lost()
    shutil.rmtree(harness.state_dir.store_path(T01, COUNTS))
    harness.manager.on_assigned(
        Assignment(frozenset({T00}), frozenset({T01}), frozenset(), {}, {}, generation=2)
    )
    harness.restore()
    standby = harness.manager.tasks[T01]
    failing(standby.stores[COUNTS], "write_restored", times=1)

    harness.tasks.restore_step(timeout=0.0)
    harness.parts.healer.heal_reported()

    assert standby.role is TaskRole.STANDBY and standby.state is TaskState.RUNNING
    assert harness.metric("worker_state_wipes_total", reason="corrupt_read") == 1
    harness.tasks.restore_step(timeout=0.0)
    assert count_of(harness, T01, b"a") == b"2"
    assert harness.manager.tasks[T00].state is TaskState.RUNNING
