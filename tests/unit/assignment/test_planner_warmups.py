"""The planner's KIP-441 rules on hand-checked examples: warmups, standbys, probing."""

from __future__ import annotations

from worker.assignment.model import NO_PROBE
from worker.assignment.planner import ClientState, PlannerConfig, plan
from worker.assignment.task_id import TaskId

T = TaskId
NOW = 1_000_000
FAR_BEHIND = 10**6


def _tasks(count: int) -> list[TaskId]:
    return [T(0, p) for p in range(count)]


def _fresh(name: str, tasks: list[TaskId]) -> ClientState:
    """A client with no state: as far behind as the whole changelog."""
    return ClientState(name, lags=dict.fromkeys(tasks, FAR_BEHIND))


def test_a_newcomer_gets_warmups_while_the_caught_up_owner_keeps_every_active() -> None:
    tasks = _tasks(8)
    clients = {"a": ClientState("a", prev_active=frozenset(tasks)), "b": _fresh("b", tasks)}
    config = PlannerConfig(max_warmup_replicas=2, probing_rebalance_interval_ms=60_000)

    result = plan(tasks, clients, config, NOW)

    assert result.active == {"a": frozenset(tasks), "b": frozenset()}
    # b's ideal share is the four tasks a gives up; two of them warm up (the budget).
    assert result.warmup == {"a": frozenset(), "b": {T(0, 4), T(0, 5)}}
    assert result.next_probe_ms == NOW + 60_000


def test_the_warmup_budget_is_shared_by_the_whole_group() -> None:
    tasks = _tasks(12)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": _fresh("b", tasks),
        "c": _fresh("c", tasks),
    }
    result = plan(tasks, clients, PlannerConfig(max_warmup_replicas=3), NOW)
    assert result.active["a"] == frozenset(tasks)
    assert sum(len(w) for w in result.warmup.values()) == 3


def test_a_warmup_within_the_recovery_lag_becomes_the_active() -> None:
    tasks = _tasks(4)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": ClientState(
            "b",
            prev_standby=frozenset({T(0, 2), T(0, 3)}),
            lags={T(0, 0): FAR_BEHIND, T(0, 1): FAR_BEHIND, T(0, 2): 50, T(0, 3): 20_000},
        ),
    }
    result = plan(tasks, clients, PlannerConfig(acceptable_recovery_lag=10_000), NOW)
    # T(0, 2) is within the lag: it moves, in two rounds (a still owns it), and b keeps
    # it warm as a standby meanwhile. T(0, 3) is not yet: it keeps warming up.
    assert result.active == {"a": {T(0, 0), T(0, 1), T(0, 3)}, "b": set()}
    assert result.pending_moves == {T(0, 2): "b"}
    assert result.standby["b"] == {T(0, 2)}
    assert result.warmup["b"] == {T(0, 3)}


def test_with_no_warmup_budget_tasks_move_without_warming_up() -> None:
    tasks = _tasks(8)
    clients = {"a": ClientState("a", prev_active=frozenset(tasks)), "b": _fresh("b", tasks)}
    result = plan(tasks, clients, PlannerConfig(max_warmup_replicas=0), NOW)
    # Still in two rounds: b restores them as standbys until a has let go of them.
    assert result.active == {"a": set(tasks[:4]), "b": set()}
    assert result.pending_moves == dict.fromkeys(tasks[4:], "b")
    assert result.standby == {"a": set(), "b": set(tasks[4:])}
    assert result.warmup == {"a": frozenset(), "b": frozenset()}
    assert result.next_probe_ms == NO_PROBE


def test_the_previous_owner_stands_in_even_when_another_caught_up_client_has_less() -> None:
    tasks = _tasks(6)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks[:4])),
        "b": _fresh("b", tasks),
        "c": ClientState("c", prev_active=frozenset(tasks[4:]), lags={T(0, 2): 0}),
    }
    result = plan(tasks, clients, PlannerConfig(), NOW)
    # a must give up two; T(0, 2) first (c has it), but c is full: b is the ideal client
    # for both, is not caught up, and a keeps running them while b warms up.
    assert result.active == {"a": set(tasks[:4]), "b": set(), "c": set(tasks[4:])}
    assert result.warmup["b"] == {T(0, 2), T(0, 3)}


def test_without_a_previous_owner_the_least_loaded_caught_up_client_stands_in() -> None:
    tasks = _tasks(4)
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 0)}), lags={T(0, 3): 10}),
        "b": ClientState("b", prev_active=frozenset({T(0, 1), T(0, 2)}), lags={T(0, 3): 5}),
        "c": _fresh("c", tasks),
    }
    result = plan(tasks, clients, PlannerConfig(), NOW)
    # c is the ideal client of T(0, 3) and is not caught up; a and b both are (10 and 5
    # are within the bound, so equal): a, which runs fewer tasks, stands in.
    assert result.active == {"a": {T(0, 0), T(0, 3)}, "b": {T(0, 1), T(0, 2)}, "c": set()}
    assert result.warmup["c"] == {T(0, 3)}


def test_every_task_gets_a_standby_on_another_client_spread_evenly() -> None:
    tasks = _tasks(6)
    clients = {name: ClientState(name) for name in ("a", "b", "c")}
    result = plan(tasks, clients, PlannerConfig(num_standby_replicas=1), NOW)
    for task in tasks:
        holders = [n for n, s in result.standby.items() if task in s]
        assert len(holders) == 1
        assert task not in result.active[holders[0]]
    assert sorted(len(s) for s in result.standby.values()) == [2, 2, 2]


def test_a_standby_goes_to_the_client_least_behind() -> None:
    tasks = [T(0, 0)]
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": _fresh("b", tasks),
        "c": ClientState("c", lags={T(0, 0): 30}),
    }
    result = plan(tasks, clients, PlannerConfig(num_standby_replicas=1), NOW)
    assert result.standby == {"a": set(), "b": set(), "c": {T(0, 0)}}


def test_a_task_warming_up_somewhere_gets_no_standby_there() -> None:
    tasks = _tasks(4)
    clients = {"a": ClientState("a", prev_active=frozenset(tasks)), "b": _fresh("b", tasks)}
    result = plan(tasks, clients, PlannerConfig(num_standby_replicas=1), NOW)
    assert result.warmup["b"] == {T(0, 2), T(0, 3)}
    assert result.standby["b"] == {T(0, 0), T(0, 1)}
    assert result.standby["a"] == frozenset()


def test_stateless_tasks_move_without_warming_up_and_get_no_standbys() -> None:
    tasks = _tasks(4)
    clients = {"a": ClientState("a", prev_active=frozenset(tasks)), "b": _fresh("b", tasks)}
    config = PlannerConfig(num_standby_replicas=1)
    result = plan(tasks, clients, config, NOW, stateless=frozenset(tasks))
    assert result.active == {"a": {T(0, 0), T(0, 1)}, "b": set()}
    assert result.pending_moves == {T(0, 2): "b", T(0, 3): "b"}
    assert result.standby == result.warmup == {"a": frozenset(), "b": frozenset()}
    assert result.next_probe_ms == NO_PROBE
