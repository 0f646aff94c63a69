"""Leaving clients (the planner's step g): a worker stopping on SIGTERM gets nothing, and
its actives move in this round to the clients holding caught-up copies."""

from __future__ import annotations

from worker.assignment.planner import ClientState, PlannerConfig, plan
from worker.assignment.task_id import TaskId

T = TaskId
NOW = 1_000_000
TASKS = [T(0, p) for p in range(6)]
CONFIG = PlannerConfig(num_standby_replicas=1)


def _three() -> dict[str, ClientState]:
    """a, b and c run two tasks each; each task's standby sits on the next client."""
    owners = {"a": TASKS[0:2], "b": TASKS[2:4], "c": TASKS[4:6]}
    standbys = {"a": TASKS[4:6], "b": TASKS[0:2], "c": TASKS[2:4]}
    return {
        name: ClientState(
            name,
            prev_active=frozenset(owners[name]),
            prev_standby=frozenset(standbys[name]),
            lags={t: 0 for t in [*owners[name], *standbys[name]]},
        )
        for name in owners
    }


def test_a_leaving_client_gets_nothing_and_its_tasks_move_to_their_caught_up_standbys() -> None:
    result = plan(TASKS, _three(), CONFIG, NOW, leaving={"c"})
    # Only a holds copies of c's tasks: both go there, and b warms one up (KIP-441).
    assert result.pending_moves == {T(0, 4): "a", T(0, 5): "a"}
    assert result.active == {"a": set(TASKS[0:2]), "b": set(TASKS[2:4]), "c": set()}
    assert result.standby["c"] == set()
    assert result.warmup == {"a": set(), "b": {T(0, 5)}, "c": set()}
    assert set(TASKS[4:6]) <= result.standby["a"]


def test_the_tasks_of_the_staying_clients_stay_and_keep_a_standby_elsewhere() -> None:
    result = plan(TASKS, _three(), CONFIG, NOW, leaving={"c"})
    for task in TASKS[0:4]:
        owner = result.owner_of(task)
        assert owner is not None and owner != "c"
        holders = [n for n, tasks in result.standby.items() if task in tasks]
        assert holders and owner not in holders and "c" not in holders


def test_once_the_leaving_client_is_gone_its_moves_complete() -> None:
    first = plan(TASKS, _three(), CONFIG, NOW, leaving={"c"})
    clients = _three()
    del clients["c"]
    clients["a"] = ClientState(
        "a",
        prev_active=frozenset([*TASKS[0:2], *TASKS[4:6]]),  # taken over on the release
        prev_standby=clients["a"].prev_standby - set(TASKS[4:6]),
        lags=clients["a"].lags,
    )
    second = plan(TASKS, clients, CONFIG, NOW, previous_moves=first.pending_moves)
    assert second.active["a"] >= set(TASKS[4:6])
    assert not set(second.pending_moves) & set(TASKS[4:6])


def test_when_every_client_is_leaving_they_are_planned_as_usual() -> None:
    clients = _three()
    assert plan(TASKS, clients, CONFIG, NOW, leaving=set(clients)) == plan(
        TASKS, clients, CONFIG, NOW
    )


def test_a_stateless_task_of_a_leaving_client_moves_without_a_standby() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset(TASKS[0:3])),
        "b": ClientState("b", prev_active=frozenset(TASKS[3:6])),
    }
    result = plan(TASKS, clients, CONFIG, NOW, stateless=TASKS, leaving={"b"})
    assert result.pending_moves == dict.fromkeys(TASKS[3:6], "a")
    assert result.active == {"a": set(TASKS[0:3]), "b": set()}
    assert result.standby == {"a": set(), "b": set()}
