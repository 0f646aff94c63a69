"""Standbys and warmups: tailing, lag, priority of active restores, recycling between roles."""

from __future__ import annotations

from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.observability import Metrics
from worker.runtime.probing import ProbeScheduler
from worker.tasks.state import TaskRole, TaskState

from .conftest import COUNTS, COUNTS_CHANGELOG, LABELS, Harness, encode

T0 = TaskId(0, 0)
T1 = TaskId(0, 1)


def roles(
    active: tuple[TaskId, ...] = (),
    standby: tuple[TaskId, ...] = (),
    warmup: tuple[TaskId, ...] = (),
    probe_ms: int = -1,
) -> Assignment:
    return Assignment(
        frozenset(active), frozenset(standby), frozenset(warmup), {}, {}, probe_ms, generation=1
    )


def rebalance(h: Harness, assignment: Assignment) -> None:
    h.manager.on_assigned(assignment)


def changelog(h: Harness, task: TaskId, *entries: tuple[str, int]) -> None:
    """Records another instance's active wrote to the task's changelog."""
    for key, count in entries:
        h.restore_consumer.append(COUNTS_CHANGELOG, task.partition, key.encode(), encode(count))


def step(h: Harness, times: int = 3) -> None:
    for _ in range(times):
        h.tasks.restore_step(timeout=0.0)


def test_a_standby_tails_its_changelogs_and_never_processes(harness: Harness) -> None:
    changelog(harness, T0, ("a", 1), ("b", 1), ("a", 2))
    harness.manager.on_assigned(roles(standby=(T0,)))
    task = harness.manager.tasks[T0]
    assert task.state is TaskState.RUNNING and task.role is TaskRole.STANDBY
    assert not harness.tasks.restoring(), "a standby never blocks processing"

    step(harness)

    assert task.stores[COUNTS].get_committed(b"a") == encode(2)
    assert task.stores[COUNTS].committed_offsets() == {(COUNTS_CHANGELOG, 0): 2}
    assert harness.consumer.assigned == frozenset(), "standbys read no source partitions"
    assert harness.metric("worker_standby_updated_records_total", task="0_0", store=COUNTS) == 3
    assert harness.metric("worker_restored_records_total", task="0_0", store=COUNTS) == 0
    assert harness.metric("worker_tasks", kind="standby") == 1


def test_standby_lag_is_the_distance_to_the_fetched_end(harness: Harness) -> None:
    harness.manager.on_assigned(roles(warmup=(T0,)))
    assert harness.tasks.warmups_caught_up(acceptable_lag=10) == [], "unknown until fetched"
    step(harness)
    assert harness.tasks.warmups_caught_up(acceptable_lag=0) == [T0]

    changelog(harness, T0, ("a", 1), ("b", 1), ("c", 1))  # the end moves on

    assert harness.tasks.warmups_caught_up(acceptable_lag=2) == []
    assert harness.tasks.warmups_caught_up(acceptable_lag=3) == [T0]
    step(harness)
    assert harness.tasks.warmups_caught_up(acceptable_lag=0) == [T0]
    assert harness.metric("worker_standby_lag_records", task="0_0") == 0


def test_standby_partitions_wait_while_an_active_restores(harness: Harness) -> None:
    changelog(harness, T0, ("a", 1))
    changelog(harness, T1, ("x", 1))
    harness.manager.on_assigned(roles(active=(T1,), standby=(T0,)))

    harness.tasks.restore_step(timeout=0.0)

    assert (COUNTS_CHANGELOG, 0) in harness.restore_consumer.paused
    standby = harness.manager.tasks[T0]
    assert standby.stores[COUNTS].get_committed(b"a") is None
    harness.restore(max_steps=10)
    step(harness)
    assert (COUNTS_CHANGELOG, 0) not in harness.restore_consumer.paused
    assert standby.stores[COUNTS].get_committed(b"a") == encode(1)


def test_an_active_recycled_into_a_standby_keeps_its_stores_and_tails_from_its_offset(
    harness: Harness,
) -> None:
    harness.manager.on_assigned(roles(active=(T0,)))
    harness.restore()
    harness.event(T0, "a")
    harness.process()
    harness.commits.commit()
    harness.replicate_changelogs()
    task = harness.manager.tasks[T0]
    store = task.stores[COUNTS]

    rebalance(harness, roles(standby=(T0,)))

    assert harness.manager.tasks[T0] is task and task.stores[COUNTS] is store
    assert task.role is TaskRole.STANDBY and task.state is TaskState.RUNNING
    assert harness.consumer.assigned == frozenset()
    changelog(harness, T0, ("a", 5))
    step(harness)
    assert store.get_committed(b"a") == encode(5)


def test_a_standby_recycled_into_an_active_restores_only_its_lag(harness: Harness) -> None:
    changelog(harness, T0, ("a", 1), ("b", 1))
    harness.manager.on_assigned(roles(standby=(T0,)))
    step(harness)
    task = harness.manager.tasks[T0]
    changelog(harness, T0, ("a", 2))  # written by the old active after our last fetch

    rebalance(harness, roles(active=(T0,)))

    assert harness.manager.tasks[T0] is task and task.role is TaskRole.ACTIVE
    assert task.state is TaskState.RESTORING
    harness.restore()
    assert task.state is TaskState.RUNNING
    assert harness.metric("worker_restored_records_total", task="0_0", store=COUNTS) == 1
    assert task.stores[COUNTS].get_committed(b"a") == encode(2)
    assert (("events", 0) in harness.consumer.assigned) and (LABELS, 0) in harness.consumer.assigned


def test_tasks_by_role_feed_the_subscription(harness: Harness) -> None:
    harness.manager.on_assigned(roles(active=(T0,), warmup=(T1,)))
    assert harness.manager.tasks_by_role(TaskRole.ACTIVE) == {T0}
    assert harness.manager.tasks_by_role(TaskRole.STANDBY, TaskRole.WARMUP) == {T1}
    assert harness.metric("worker_tasks", kind="warmup") == 1


class _Requests:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def request_rebalance(self, reason: str) -> None:
        self.reasons.append(reason)


class _Warmups:
    def __init__(self, caught_up: list[TaskId]) -> None:
        self.caught_up = caught_up

    def warmups_caught_up(self, acceptable_lag: int) -> list[TaskId]:
        return self.caught_up


def test_a_caught_up_warmup_asks_for_one_rebalance_per_assignment() -> None:
    clock, metrics, requests = FakeClock(), Metrics(), _Requests()
    probes = ProbeScheduler(10_000, clock, metrics)
    warmups = _Warmups([])
    probes.check(warmups, requests)
    assert requests.reasons == [], "nothing before the first assignment"

    probes.on_assignment(roles(warmup=(T0,)))
    probes.check(warmups, requests)
    assert requests.reasons == []
    warmups.caught_up = [T0]
    clock.advance(1.0)
    probes.check(warmups, requests)
    clock.advance(1.0)
    probes.check(warmups, requests)

    assert requests.reasons == ["warmup caught up"]
    assert metrics.registry.get_sample_value("worker_warmups_caught_up_total") == 1


def test_the_probing_time_triggers_a_rebalance_when_no_warmup_caught_up() -> None:
    clock, metrics, requests = FakeClock(now=1000.0), Metrics(), _Requests()
    probes = ProbeScheduler(10_000, clock, metrics)
    probes.on_assignment(roles(warmup=(T0,), probe_ms=1_000_000 + 30_000))

    probes.check(_Warmups([]), requests)
    assert requests.reasons == []
    clock.advance(31.0)
    probes.check(_Warmups([]), requests)

    assert requests.reasons == ["probing interval elapsed"]
