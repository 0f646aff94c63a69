"""Invariants of the pure planner over random groups (hypothesis prints the failing example)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.assignment.model import LATEST_OFFSET, UNKNOWN_OFFSET_SUM
from worker.assignment.planner import ClientState, Plan, PlannerConfig, plan
from worker.assignment.task_id import TaskId

CONFIG = PlannerConfig()

task_ids = st.builds(TaskId, st.integers(0, 3), st.integers(0, 11))
task_lists = st.lists(task_ids, max_size=40, unique=True)
process_ids = st.text(alphabet="abcdef0123456789", min_size=1, max_size=6)
offset_sums = st.one_of(st.just(LATEST_OFFSET), st.just(UNKNOWN_OFFSET_SUM), st.integers(0, 10**12))


@st.composite
def client_states(draw: st.DrawFn, name: str) -> ClientState:
    prev_active = draw(st.frozensets(task_ids, max_size=12))
    sums = draw(st.dictionaries(task_ids, offset_sums, max_size=12))
    return ClientState(name, prev_active, frozenset(), sums)


@st.composite
def groups(draw: st.DrawFn) -> dict[str, ClientState]:
    names = draw(st.lists(process_ids, min_size=1, max_size=7, unique=True))
    return {name: draw(client_states(name)) for name in names}


def _owners(result: Plan) -> dict[TaskId, str]:
    owners: dict[TaskId, str] = {}
    for name, tasks in result.active.items():
        for task in tasks:
            assert task not in owners, f"{task} active on {owners[task]} and {name}"
            owners[task] = name
    return owners


def _with_previous(clients: Mapping[str, ClientState], result: Plan) -> dict[str, ClientState]:
    """The same clients at the next rebalance, each reporting what ``result`` gave it."""
    return {
        name: ClientState(name, result.active[name], frozenset(), client.offset_sums)
        for name, client in clients.items()
    }


def _moved(before: Plan, after: Plan) -> int:
    old, new = _owners(before), _owners(after)
    return sum(1 for task, owner in new.items() if old.get(task) != owner)


@given(task_lists, groups())
def test_every_task_is_active_on_exactly_one_client(
    tasks: list[TaskId], clients: dict[str, ClientState]
) -> None:
    result = plan(tasks, clients, CONFIG)
    assert set(result.active) == set(clients)
    assert set(_owners(result)) == set(tasks)


@given(task_lists, groups())
def test_active_counts_differ_by_at_most_one(
    tasks: list[TaskId], clients: dict[str, ClientState]
) -> None:
    counts = [len(active) for active in plan(tasks, clients, CONFIG).active.values()]
    assert max(counts) - min(counts) <= 1


@given(task_lists, groups(), st.randoms(use_true_random=False))
def test_same_input_in_any_order_gives_the_same_plan(
    tasks: list[TaskId], clients: dict[str, ClientState], rnd: object
) -> None:
    first = plan(tasks, clients, CONFIG)
    shuffled_tasks = list(tasks)
    names = list(clients)
    rnd.shuffle(shuffled_tasks)  # type: ignore[attr-defined]
    rnd.shuffle(names)  # type: ignore[attr-defined]
    assert plan(shuffled_tasks, {n: clients[n] for n in names}, CONFIG) == first
    assert plan(tasks, clients, CONFIG) == first


@given(task_lists, groups())
def test_nothing_moves_when_membership_is_unchanged_after_a_balanced_plan(
    tasks: list[TaskId], clients: dict[str, ClientState]
) -> None:
    previous = plan(tasks, clients, CONFIG)
    again = plan(tasks, _with_previous(clients, previous), CONFIG)
    assert again.active == previous.active


@given(task_lists, groups(), process_ids, st.dictionaries(task_ids, offset_sums, max_size=12))
def test_a_joining_client_moves_only_the_minimum_number_of_tasks(
    tasks: list[TaskId],
    clients: dict[str, ClientState],
    newcomer: str,
    newcomer_sums: dict[TaskId, int],
) -> None:
    newcomer = "new-" + newcomer
    previous = plan(tasks, clients, CONFIG)
    grown = _with_previous(clients, previous)
    grown[newcomer] = ClientState(newcomer, frozenset(), frozenset(), newcomer_sums)
    after = plan(tasks, grown, CONFIG)

    base, extra = divmod(len(tasks), len(grown))
    had = [len(previous.active[name]) for name in clients]
    most_kept = sum(min(n, base) for n in had) + min(extra, sum(1 for n in had if n > base))
    assert _moved(previous, after) == len(tasks) - most_kept
    assert len(after.active[newcomer]) >= base


@settings(max_examples=200)
@given(task_lists, groups(), st.data())
def test_when_a_client_leaves_only_its_tasks_move(
    tasks: list[TaskId], clients: dict[str, ClientState], data: st.DataObject
) -> None:
    previous = plan(tasks, clients, CONFIG)
    leaving = data.draw(st.sampled_from(sorted(clients)))
    remaining = _with_previous(clients, previous)
    del remaining[leaving]
    if not remaining:
        return
    after = plan(tasks, remaining, CONFIG)
    assert _moved(previous, after) == len(previous.active[leaving])
