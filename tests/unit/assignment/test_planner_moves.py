"""Two-phase moves (KIP-429, the planner's step f) on hand-checked examples."""

from __future__ import annotations

from worker.assignment.model import NO_PROBE
from worker.assignment.planner import ClientState, PlannerConfig, plan
from worker.assignment.task_id import TaskId

T = TaskId
NOW = 1_000_000
TASKS = [T(0, p) for p in range(4)]


def _scale_out(config: PlannerConfig) -> dict[str, ClientState]:
    """a runs every task; b has just joined with state as current as a's."""
    return {
        "a": ClientState("a", prev_active=frozenset(TASKS)),
        "b": ClientState("b", lags=dict.fromkeys(TASKS, 0)),
    }


def test_a_task_changing_owner_is_active_nowhere_and_a_standby_of_its_new_owner() -> None:
    config = PlannerConfig()
    result = plan(TASKS, _scale_out(config), config, NOW)
    assert result.active == {"a": {T(0, 0), T(0, 1)}, "b": set()}
    assert result.pending_moves == {T(0, 2): "b", T(0, 3): "b"}
    assert result.standby == {"a": set(), "b": {T(0, 2), T(0, 3)}}
    assert result.warmup == {"a": set(), "b": set()}
    assert result.next_probe_ms == NO_PROBE


def test_the_old_owner_keeps_a_standby_of_a_moved_task_only_where_the_plan_gives_one() -> None:
    config = PlannerConfig(num_standby_replicas=1)
    result = plan(TASKS, _scale_out(config), config, NOW)
    assert result.pending_moves == {T(0, 2): "b", T(0, 3): "b"}
    assert result.standby == {"a": {T(0, 2), T(0, 3)}, "b": set(TASKS)}


def test_the_follow_up_round_gives_each_withheld_task_to_its_intended_owner() -> None:
    config = PlannerConfig(num_standby_replicas=1)
    first = plan(TASKS, _scale_out(config), config, NOW)
    # a revoked T(0, 2) and T(0, 3) and is 0 behind on them; b's standbys are 5 behind.
    clients = {
        "a": ClientState("a", first.active["a"], first.standby["a"], dict.fromkeys(TASKS, 0)),
        "b": ClientState("b", first.active["b"], first.standby["b"], dict.fromkeys(TASKS, 5)),
    }
    for memory in (first.pending_moves, None):
        result = plan(TASKS, clients, config, NOW, previous_moves=memory)
        assert result.active == {"a": {T(0, 0), T(0, 1)}, "b": {T(0, 2), T(0, 3)}}, memory
        assert result.pending_moves == {}
        assert result.standby == {"a": {T(0, 2), T(0, 3)}, "b": {T(0, 0), T(0, 1)}}


def test_of_two_claimers_the_planned_one_keeps_the_task_and_the_other_just_loses_it() -> None:
    tasks = [T(0, 0), T(0, 1)]
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": ClientState("b", prev_active=frozenset({T(0, 0)})),
    }
    result = plan(tasks, clients, PlannerConfig(), NOW)
    assert result.active == {"a": {T(0, 1)}, "b": {T(0, 0)}}
    assert result.pending_moves == {}


def test_a_task_claimed_twice_and_planned_elsewhere_is_withheld_from_both_claimers() -> None:
    tasks = [T(0, 0), T(0, 1), T(0, 2)]
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 0), T(0, 1)})),
        "b": ClientState("b", prev_active=frozenset({T(0, 0), T(0, 2)})),
        "c": ClientState("c", lags={T(0, 0): 0}),
    }
    result = plan(tasks, clients, PlannerConfig(), NOW)
    assert result.active == {"a": {T(0, 1)}, "b": {T(0, 2)}, "c": set()}
    assert result.pending_moves == {T(0, 0): "c"}
    assert result.standby["c"] == {T(0, 0)}


def test_the_leaders_memory_yields_to_a_claim() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 0)})),
        "b": ClientState("b", prev_standby=frozenset({T(0, 0)}), lags={T(0, 0): 0}),
    }
    result = plan([T(0, 0)], clients, PlannerConfig(), NOW, previous_moves={T(0, 0): "b"})
    assert result.active == {"a": {T(0, 0)}, "b": set()}


def test_the_leaders_memory_counts_only_while_the_target_holds_the_standby() -> None:
    def follow_up(b_standby: frozenset[TaskId]) -> str | None:
        clients = {
            "a": ClientState("a", lags={T(0, 0): 0}),
            "b": ClientState("b", prev_standby=b_standby, lags={T(0, 0): 0}),
        }
        config = PlannerConfig()
        moves = {T(0, 0): "b", T(0, 9): "b", T(0, 1): "gone"}
        return plan([T(0, 0)], clients, config, NOW, previous_moves=moves).owner_of(T(0, 0))

    assert follow_up(frozenset({T(0, 0)})) == "b"
    assert follow_up(frozenset()) == "a"
