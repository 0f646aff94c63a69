"""The planner's placement rules on small, hand-checked examples (actives and balance)."""

from __future__ import annotations

from worker.assignment.model import NO_PROBE
from worker.assignment.planner import UNKNOWN_LAG, ClientState, Plan, PlannerConfig, plan
from worker.assignment.task_id import TaskId

T = TaskId
CONFIG = PlannerConfig()
NOW = 1_000_000


def _tasks(subtopologies: int, partitions: int) -> list[TaskId]:
    return [T(s, p) for s in range(subtopologies) for p in range(partitions)]


def _counts(result: Plan) -> dict[str, int]:
    return {name: len(tasks) for name, tasks in result.active.items()}


def _caught_up(name: str, tasks: list[TaskId], **kwargs: frozenset[TaskId]) -> ClientState:
    """A client whose local state is current for ``tasks`` (lag 0)."""
    return ClientState(name, lags=dict.fromkeys(tasks, 0), **kwargs)


def test_no_clients_gives_an_empty_plan() -> None:
    assert plan(_tasks(1, 3), {}, CONFIG, NOW) == Plan({}, {}, {}, NO_PROBE)


def test_no_tasks_gives_every_client_empty_sets() -> None:
    result = plan([], {"a": ClientState("a")}, CONFIG, NOW)
    assert result.active == result.standby == result.warmup == {"a": frozenset()}
    assert result.next_probe_ms == NO_PROBE


def test_fresh_clients_split_tasks_evenly() -> None:
    clients = {name: ClientState(name) for name in ("a", "b")}
    result = plan(_tasks(2, 4), clients, CONFIG, NOW)
    assert _counts(result) == {"a": 4, "b": 4}
    assert result.active["a"] | result.active["b"] == frozenset(_tasks(2, 4))
    assert result.warmup == {"a": frozenset(), "b": frozenset()}


def test_a_task_stays_with_its_previous_owner() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 3), T(0, 2)})),
        "b": ClientState("b", prev_active=frozenset({T(0, 0), T(0, 1)})),
    }
    result = plan(_tasks(1, 4), clients, CONFIG, NOW)
    assert result.active == {"a": {T(0, 2), T(0, 3)}, "b": {T(0, 0), T(0, 1)}}


def test_an_overloaded_owner_hands_tasks_to_a_caught_up_client_without_warming_up() -> None:
    tasks = _tasks(1, 4)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": _caught_up("b", tasks),
    }
    result = plan(tasks, clients, CONFIG, NOW)
    # Two-phase moves: a still owns T(0, 2) and T(0, 3), so b gets them next round.
    assert result.active == {"a": {T(0, 0), T(0, 1)}, "b": set()}
    assert result.pending_moves == {T(0, 2): "b", T(0, 3): "b"}
    assert result.warmup == {"a": frozenset(), "b": frozenset()}
    assert result.next_probe_ms == NO_PROBE


def test_an_overloaded_owner_gives_up_first_the_tasks_someone_else_has_caught_up_on() -> None:
    tasks = _tasks(1, 4)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": _caught_up("b", [T(0, 1), T(0, 3)]),
    }
    result = plan(tasks, clients, CONFIG, NOW)
    assert result.active == {"a": {T(0, 0), T(0, 2)}, "b": set()}
    assert result.pending_moves == {T(0, 1): "b", T(0, 3): "b"}
    assert result.next_probe_ms == NO_PROBE


def test_freed_tasks_go_to_any_caught_up_client_the_scarcest_first() -> None:
    tasks = _tasks(1, 3)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": ClientState("b", lags={T(0, 2): 500}),
        "c": ClientState("c", lags={T(0, 1): 9000, T(0, 2): 100}),
    }
    result = plan(tasks, clients, CONFIG, NOW)
    # a keeps T(0, 0) (nobody else has it). Only c is caught up on T(0, 1): it goes first,
    # to c. b and c are equally caught up on T(0, 2) (500 and 100 are both within the
    # bound) and c is full: b. No warmup needed; both moves wait for the next round.
    assert result.active == {"a": {T(0, 0)}, "b": set(), "c": set()}
    assert result.pending_moves == {T(0, 1): "c", T(0, 2): "b"}
    assert result.warmup == {"a": set(), "b": set(), "c": set()}


def test_among_caught_up_clients_the_less_loaded_gets_a_task_not_the_least_behind() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 1)}), lags={T(0, 0): 0}),
        "b": ClientState("b", lags={T(0, 0): 5}),
    }
    result = plan(_tasks(1, 3), clients, CONFIG, NOW)
    assert result.active == {"a": {T(0, 1), T(0, 2)}, "b": {T(0, 0)}}


def test_beyond_the_recovery_lag_the_least_behind_client_gets_a_task() -> None:
    clients = {
        "a": ClientState("a", lags={T(0, 0): 50_000}),
        "b": ClientState("b", lags={T(0, 0): 20_000}),
    }
    config = PlannerConfig(acceptable_recovery_lag=10_000)
    assert plan([T(0, 0)], clients, config, NOW).owner_of(T(0, 0)) == "b"


def test_ties_go_to_the_lowest_key() -> None:
    clients = {name: ClientState(name, lags={T(0, 0): 7}) for name in ("b", "a", "c")}
    assert plan([T(0, 0)], clients, CONFIG, NOW).owner_of(T(0, 0)) == "a"


def test_when_two_clients_claim_a_task_the_lowest_key_keeps_it() -> None:
    clients = {name: ClientState(name, prev_active=frozenset({T(0, 0)})) for name in ("b", "a")}
    result = plan([T(0, 0)], clients, CONFIG, NOW)
    assert result.owner_of(T(0, 0)) == "a"
    assert result.warmup == {"a": frozenset(), "b": frozenset()}


def test_the_extra_slot_goes_to_the_client_that_already_had_more() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 0)})),
        "b": ClientState("b", prev_active=frozenset({T(0, 1), T(0, 2)})),
    }
    result = plan(_tasks(1, 3), clients, CONFIG, NOW)
    assert result.active == {"a": {T(0, 0)}, "b": {T(0, 1), T(0, 2)}}


def test_previous_tasks_that_no_longer_exist_are_ignored() -> None:
    clients = {"a": ClientState("a", prev_active=frozenset({T(5, 0)}))}
    assert plan([T(0, 0)], clients, CONFIG, NOW).active == {"a": {T(0, 0)}}


def test_a_previous_active_counts_as_caught_up_and_a_missing_lag_as_unknown() -> None:
    client = ClientState("a", prev_active=frozenset({T(0, 0)}), lags={T(0, 0): 99, T(0, 1): 5})
    assert client.lag(T(0, 0)) == 0
    assert client.lag(T(0, 1)) == 5
    assert client.lag(T(0, 2)) == UNKNOWN_LAG


def test_owner_of_an_unassigned_task_is_none() -> None:
    assert plan([T(0, 0)], {"a": ClientState("a")}, CONFIG, NOW).owner_of(T(9, 9)) is None
