"""Standbys, warmups and probing rebalances with several real worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from tests.integration.example_app import TASKS, ExampleData, example_data, wait_profiles_served
from tests.support.traffic import SteadyProducer
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]


def roles(worker: WorkerProcess) -> dict[str, str]:
    """task id -> kind (active, standby, warmup) as the worker reports it."""
    code, body = worker.get("/readyz")
    assert code in (200, 503)
    return {t["task_id"]: t["kind"] for t in orjson.loads(body)["tasks"]}


def layout(workers: list[WorkerProcess]) -> dict[str, dict[str, list[str]]]:
    """task -> kind -> names of the workers holding it in that role."""
    found: dict[str, dict[str, list[str]]] = {t: {} for t in TASKS}
    for worker in workers:
        for task, kind in roles(worker).items():
            found[task].setdefault(kind, []).append(worker.name)
    return found


def settled_with_standbys(workers: list[WorkerProcess]) -> dict[str, dict[str, list[str]]] | None:
    """The layout, once every task has one active and one standby on different workers."""
    if not all(w.ready() for w in workers):
        return None
    found = layout(workers)
    for kinds in found.values():
        if len(kinds.get("active", [])) != 1 or len(kinds.get("standby", [])) != 1:
            return None
        if kinds["active"] == kinds["standby"] or kinds.get("warmup"):
            return None
    return found


@pytest.fixture
def three(own_broker, worker_factory) -> Iterator[tuple[ExampleData, list[WorkerProcess]]]:
    data = example_data(own_broker.bootstrap, accounts=300)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "commit.interval.ms": 200,
        "num.standby.replicas": 1,
        # The state here is small: with the default (10000) every survivor would count as
        # caught up. Only a standby at lag 0 does with this.
        "acceptable.recovery.lag": 10,
    }
    workers = [worker_factory(name, settings=settings) for name in ("a", "b", "c")]
    yield data, workers


def store_offsets(worker: WorkerProcess) -> dict[str, dict[str, int | None]]:
    """task id -> store name -> stored changelog offset, from the worker's ``/tasks``."""
    code, body = worker.get("/tasks")
    assert code == 200
    return {
        t["task_id"]: {s["name"]: s["offset"] for s in t["stores"]}
        for t in orjson.loads(body)["tasks"]
    }


def standbys_caught_up(layout_before, workers) -> bool:
    """Every standby holds exactly what its active has committed, and nothing is pending.

    (A standby's reported lag can read 0 before it has fetched the newest end, so the
    stored offsets themselves are compared.)"""
    if not all(w.metric("worker_uncommitted_bytes") == 0 for w in workers):
        return False
    by_name = {w.name: w for w in workers}
    offsets = {w.name: store_offsets(w) for w in workers}
    for task, kinds in layout_before.items():
        active = offsets[kinds["active"][0]].get(task)
        standby = offsets[by_name[kinds["standby"][0]].name].get(task)
        if active is None or standby is None or active != standby:
            return False
    return True


def _moved_tasks_restore_only_their_lag(before, survivors, victim, restored_before):
    """Each of the victim's actives becomes active on a survivor that held a caught-up
    copy of it, so that it restores nothing at all: usually the worker with its standby;
    on the test broker a survivor can miss the first round after the failure (it was
    still rejoining), and then the task lands where the balance puts it, through a warmup
    that caught up first (worker logs of a parallel CI run: warmup on b, 0 records
    restored). Either way the new owner's copy was being updated before it took over.
    ``restored_before``: each survivor's restored-records count per task before the
    failure (a survivor may have owned the task in an earlier round and restored it then:
    seen on Kafka, whose fast first rounds place tasks before the last member joins)."""
    moved = [t for t, kinds in before.items() if kinds["active"] == [victim]]
    assert moved, "the victim owned some active tasks"
    for task in moved:
        heirs: list[WorkerProcess] = []

        def taken_over(task: str = task, heirs: list[WorkerProcess] = heirs) -> bool:
            heirs[:] = [
                w
                for w in survivors
                if w.healthy()
                and _running_active(w, task)
                and w.metric("worker_restored_records_total", task=task)
                == restored_before[w.name].get(task, 0.0)
            ]
            return bool(heirs)

        wait_until(taken_over, 90, message=f"{task} active on a survivor with nothing restored")
        assert heirs[0].metric("worker_standby_updated_records_total", task=task) > 0, (
            f"{heirs[0].name} took {task} over without a copy kept up to date"
        )


def _restored_by_task(workers) -> dict[str, dict[str, float]]:
    """Each worker's ``worker_restored_records_total`` per task so far (summed over its
    other labels, as ``WorkerProcess.metric`` sums them)."""
    counts: dict[str, dict[str, float]] = {}
    for w in workers:
        mine = counts.setdefault(w.name, {})
        for _, labels, value in w.metric_samples("worker_restored_records_total"):
            if "task" in labels:
                mine[labels["task"]] = mine.get(labels["task"], 0.0) + value
    return counts


def _running_active(worker: WorkerProcess, task: str) -> bool:
    code, body = worker.get("/readyz")
    return any(
        t["task_id"] == task and t["kind"] == "active" and t["state"] == "running"
        for t in orjson.loads(body)["tasks"]
    )


def _process_with_standbys_in_sync(data, workers, payments: int):
    """Standbys placed, ``payments`` processed and every standby holding what its active
    committed; returns the layout (task -> kind -> workers) at that moment."""
    before = wait_until(lambda: settled_with_standbys(workers), 120, message="standbys placed")
    wait_profiles_served(data, workers[0])
    data.produce(payments)
    wait_until(
        lambda: sum(w.metric("worker_processed_records_total") for w in workers) >= payments,
        90,
        message="all payments processed",
    )
    wait_until(lambda: standbys_caught_up(before, workers), 60, message="standbys in sync")
    return before


@pytest.mark.duration(19)
def test_every_task_has_a_standby_elsewhere_and_a_killed_worker_fails_over_to_them(
    three, worker_factory
):
    data, workers = three
    before = _process_with_standbys_in_sync(data, workers, 6000)
    victim = workers[0]
    restored = _restored_by_task(workers[1:])
    assert victim.kill() == -9

    _moved_tasks_restore_only_their_lag(before, workers[1:], victim.name, restored)
    data.produce(1000)
    _, expected_alerts = data.reference()
    wait_until(
        lambda: {a["payment_id"] for a in data.alerts()} >= set(expected_alerts),
        90,
        message="every expected alert, none lost to the kill",
    )


@pytest.mark.duration(18)
def test_graceful_scale_in_moves_actives_to_standbys_and_reprocesses_nothing(three, worker_factory):
    data, workers = three
    before = _process_with_standbys_in_sync(data, workers, 4000)
    leaving = workers[2]
    restored = _restored_by_task(workers[:2])
    assert leaving.terminate() == 0

    _moved_tasks_restore_only_their_lag(before, workers[:2], leaving.name, restored)
    data.produce(1000)
    expected_totals, _ = data.reference()
    wait_until(
        lambda: data.totals_from_changelog(worker_factory.application_id) == expected_totals,
        90,
        message="totals equal the reference exactly: nothing counted twice",
    )


@pytest.mark.duration(19)
def test_scale_out_warms_up_the_newcomer_before_moving_any_active(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap, accounts=3000)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "commit.interval.ms": 200,
        "num.standby.replicas": 0,
        "acceptable.recovery.lag": 500,
    }
    first = worker_factory("first", settings=settings)
    first.wait_ready(90)
    data.produce(30000)
    wait_until(
        lambda: first.metric("worker_processed_records_total") >= 30000, 90, message="state built"
    )
    with SteadyProducer(data):
        second = worker_factory("second", settings=settings)
        seen: list[dict[str, str]] = []

        def balanced() -> bool:
            if not (second.healthy() and first.ready()):
                return False
            seen.append(roles(second))
            kinds = list(roles(first).values()) + list(seen[-1].values())
            return (
                kinds.count("active") == len(TASKS)
                and "warmup" not in kinds
                and "active" in seen[-1].values()
            )

        wait_until(balanced, 120, interval=0.2, message="balanced after warmups caught up")
        processed_during = first.metric("worker_processed_records_total")

    first_kinds = [k for snapshot in seen for k in snapshot.values()]
    assert "warmup" in first_kinds, "the newcomer warmed up first"
    first_active = next(i for i, s in enumerate(seen) if "active" in s.values())
    assert all("active" not in s.values() for s in seen[:first_active])
    assert any("warmup" in s.values() for s in seen[:first_active])
    assert list(roles(first).values()).count("active") == len(TASKS) // 2
    assert second.metric("worker_warmups_caught_up_total") >= 1
    assert second.metric("worker_probing_rebalances_total") >= 1
    assert processed_during > 30000, "the old owner kept processing while the newcomer warmed up"
