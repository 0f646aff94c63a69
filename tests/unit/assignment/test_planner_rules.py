"""The planner's placement rules on small, hand-checked examples."""

from __future__ import annotations

from worker.assignment.model import LATEST_OFFSET
from worker.assignment.planner import ClientState, Plan, PlannerConfig, plan, state_score
from worker.assignment.task_id import TaskId

T = TaskId
CONFIG = PlannerConfig()


def _tasks(subtopologies: int, partitions: int) -> list[TaskId]:
    return [T(s, p) for s in range(subtopologies) for p in range(partitions)]


def _counts(result: Plan) -> dict[str, int]:
    return {name: len(tasks) for name, tasks in result.active.items()}


def test_no_clients_gives_an_empty_plan() -> None:
    assert plan(_tasks(1, 3), {}, CONFIG) == Plan({}, {}, {})


def test_no_tasks_gives_every_client_empty_sets() -> None:
    result = plan([], {"a": ClientState("a")}, CONFIG)
    assert result.active == {"a": frozenset()}
    assert result.standby == {"a": frozenset()}
    assert result.warmup == {"a": frozenset()}


def test_fresh_clients_split_tasks_evenly() -> None:
    clients = {name: ClientState(name) for name in ("a", "b")}
    result = plan(_tasks(2, 4), clients, CONFIG)
    assert _counts(result) == {"a": 4, "b": 4}
    assert result.active["a"] | result.active["b"] == frozenset(_tasks(2, 4))


def test_a_task_stays_with_its_previous_owner() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 3), T(0, 2)})),
        "b": ClientState("b", prev_active=frozenset({T(0, 0), T(0, 1)})),
    }
    result = plan(_tasks(1, 4), clients, CONFIG)
    assert result.active == {"a": {T(0, 2), T(0, 3)}, "b": {T(0, 0), T(0, 1)}}


def test_an_overloaded_previous_owner_keeps_its_lowest_tasks_and_gives_up_the_rest() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset(_tasks(1, 4))),
        "b": ClientState("b"),
    }
    result = plan(_tasks(1, 4), clients, CONFIG)
    assert result.active["a"] == {T(0, 0), T(0, 1)}
    assert result.active["b"] == {T(0, 2), T(0, 3)}


def test_a_moved_task_goes_to_the_client_with_the_most_local_state() -> None:
    tasks = _tasks(1, 3)
    clients = {
        "a": ClientState("a", prev_active=frozenset(tasks)),
        "b": ClientState("b", offset_sums={T(0, 2): 10}),
        "c": ClientState("c", offset_sums={T(0, 1): 500, T(0, 2): 900}),
    }
    result = plan(tasks, clients, CONFIG)
    # a keeps one (its quota), T(0, 2) goes to c (900 > 10), T(0, 1) then to b.
    assert result.active == {"a": {T(0, 0)}, "b": {T(0, 1)}, "c": {T(0, 2)}}


def test_a_running_active_outranks_any_offset_sum() -> None:
    clients = {
        "a": ClientState("a", offset_sums={T(0, 0): 10**15}),
        "b": ClientState("b", offset_sums={T(0, 0): LATEST_OFFSET}),
    }
    result = plan([T(0, 0)], clients, CONFIG)
    assert result.active["b"] == {T(0, 0)}
    assert state_score(clients["b"], T(0, 0)) > state_score(clients["a"], T(0, 0))


def test_when_two_clients_claim_a_task_the_one_with_more_state_keeps_it() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 0)}), offset_sums={T(0, 0): 5}),
        "b": ClientState(
            "b", prev_active=frozenset({T(0, 0)}), offset_sums={T(0, 0): LATEST_OFFSET}
        ),
    }
    assert plan([T(0, 0)], clients, CONFIG).owner_of(T(0, 0)) == "b"


def test_ties_go_to_the_lowest_process_id() -> None:
    clients = {name: ClientState(name, offset_sums={T(0, 0): 7}) for name in ("b", "a", "c")}
    assert plan([T(0, 0)], clients, CONFIG).owner_of(T(0, 0)) == "a"


def test_the_extra_slot_goes_to_the_client_that_already_had_more() -> None:
    clients = {
        "a": ClientState("a", prev_active=frozenset({T(0, 0)})),
        "b": ClientState("b", prev_active=frozenset({T(0, 1), T(0, 2)})),
    }
    result = plan(_tasks(1, 3), clients, CONFIG)
    assert result.active == {"a": {T(0, 0)}, "b": {T(0, 1), T(0, 2)}}


def test_previous_tasks_that_no_longer_exist_are_ignored() -> None:
    clients = {"a": ClientState("a", prev_active=frozenset({T(5, 0)}))}
    assert plan([T(0, 0)], clients, CONFIG).active == {"a": {T(0, 0)}}


def test_negative_sentinels_other_than_latest_count_as_no_state() -> None:
    client = ClientState("a", offset_sums={T(0, 0): -3, T(0, 1): -4})
    assert state_score(client, T(0, 0)) == state_score(client, T(0, 1)) == -1
    assert state_score(client, T(0, 2)) == -1


def test_owner_of_an_unassigned_task_is_none() -> None:
    assert plan([T(0, 0)], {"a": ClientState("a")}, CONFIG).owner_of(T(9, 9)) is None
