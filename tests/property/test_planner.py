"""Invariants of the pure planner over random groups (hypothesis prints the failing example
and how to reproduce it; ``--hypothesis-seed`` replays a run)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.assignment.model import NO_PROBE
from worker.assignment.planner import ClientState, Plan, PlannerConfig, plan
from worker.assignment.task_id import TaskId

NOW = 1_700_000_000_000
ACCEPTABLE = 1000

task_ids = st.builds(TaskId, st.integers(0, 3), st.integers(0, 11))
task_lists = st.lists(task_ids, max_size=30, unique=True)
process_ids = st.text(alphabet="abcdef0123456789", min_size=1, max_size=6)
# Lags around the recovery bound: caught up, just within, just beyond, far behind.
lags = st.sampled_from([0, 1, ACCEPTABLE, ACCEPTABLE + 1, 50_000, 10**9])
configs = st.builds(
    PlannerConfig,
    num_standby_replicas=st.integers(0, 2),
    max_warmup_replicas=st.integers(1, 3),
    acceptable_recovery_lag=st.just(ACCEPTABLE),
    probing_rebalance_interval_ms=st.just(60_000),
)


@dataclass(frozen=True)
class Case:
    tasks: list[TaskId]
    clients: dict[str, ClientState]
    config: PlannerConfig
    stateless: frozenset[TaskId]

    def run(self) -> Plan:
        return plan(self.tasks, self.clients, self.config, NOW, self.stateless)


@st.composite
def client_states(draw: st.DrawFn, name: str, tasks: list[TaskId]) -> ClientState:
    # Mostly tasks of this plan; sometimes one that no longer exists.
    pick = st.one_of(st.sampled_from(tasks), task_ids) if tasks else task_ids
    prev_active = draw(st.frozensets(pick, max_size=12))
    prev_standby = draw(st.frozensets(pick, max_size=12)) - prev_active
    known = draw(st.dictionaries(pick, lags, max_size=len(tasks)))
    return ClientState(name, prev_active, prev_standby, known)


@st.composite
def cases(draw: st.DrawFn, config: st.SearchStrategy[PlannerConfig] = configs) -> Case:
    tasks = draw(task_lists)
    names = draw(st.lists(process_ids, min_size=1, max_size=6, unique=True))
    clients = {name: draw(client_states(name, tasks)) for name in names}
    stateless = draw(st.frozensets(st.sampled_from(tasks), max_size=4)) if tasks else frozenset()
    return Case(tasks, clients, draw(config), stateless)


def _all_caught_up(case: Case) -> Case:
    """The same group where every client is within the recovery lag on every task."""
    clients = {
        name: replace(c, lags={t: min(lag, ACCEPTABLE) for t, lag in c.lags.items()})
        for name, c in case.clients.items()
    }
    for name, client in clients.items():
        clients[name] = replace(client, lags={**dict.fromkeys(case.tasks, 0), **client.lags})
    return replace(case, clients=clients)


def _owners(result: Plan) -> dict[TaskId, str]:
    owners: dict[TaskId, str] = {}
    for name, tasks in result.active.items():
        for task in tasks:
            assert task not in owners, f"{task} active on {owners[task]} and {name}"
            owners[task] = name
    return owners


def _holders(roles: Mapping[str, frozenset[TaskId]], task: TaskId) -> list[str]:
    return [name for name, tasks in roles.items() if task in tasks]


def _balanced(result: Plan) -> bool:
    counts = [len(active) for active in result.active.values()]
    return max(counts) - min(counts) <= 1


def _next_round(case: Case, result: Plan) -> Case:
    """The same clients at the next rebalance: they report what ``result`` gave them, and
    every copy they held (active, standby, warmup) has caught up meanwhile."""
    clients = {}
    for name, client in case.clients.items():
        held = result.active[name] | result.standby[name] | result.warmup[name]
        clients[name] = ClientState(
            name,
            result.active[name],
            result.standby[name] | result.warmup[name],
            {**client.lags, **dict.fromkeys(held, 0)},
        )
    return replace(case, clients=clients)


@given(cases())
def test_every_task_is_active_on_exactly_one_client(case: Case) -> None:
    result = case.run()
    assert set(result.active) == set(result.standby) == set(result.warmup) == set(case.clients)
    assert set(_owners(result)) == set(case.tasks)


@given(cases())
def test_no_client_holds_two_roles_for_one_task(case: Case) -> None:
    result = case.run()
    for name in case.clients:
        active, standby, warmup = result.active[name], result.standby[name], result.warmup[name]
        assert not (active & standby or active & warmup or standby & warmup), name


@given(cases())
def test_standbys_per_task_are_as_many_as_configured_and_the_group_allows(case: Case) -> None:
    result = case.run()
    for task in case.tasks:
        warmups = len(_holders(result.warmup, task))
        expected = min(case.config.num_standby_replicas, len(case.clients) - 1 - warmups)
        if task in case.stateless:
            expected = 0
        assert len(_holders(result.standby, task)) == expected, task


@given(cases())
def test_warmups_stay_within_the_group_budget_and_schedule_one_probe(case: Case) -> None:
    result = case.run()
    total = sum(len(w) for w in result.warmup.values())
    assert total <= case.config.max_warmup_replicas
    expected = NOW + case.config.probing_rebalance_interval_ms if total else NO_PROBE
    assert result.next_probe_ms == expected


@given(cases())
def test_no_active_is_placed_beyond_the_recovery_lag_when_a_caught_up_client_exists(
    case: Case,
) -> None:
    result = case.run()
    group = {name: client for name, client in case.clients.items()}
    for task, owner in _owners(result).items():
        if task in case.stateless:
            continue
        caught_up = [n for n, c in group.items() if c.lag(task) <= ACCEPTABLE]
        if caught_up:
            assert owner in caught_up, (task, owner, caught_up)
        for name in _holders(result.warmup, task):
            assert group[name].lag(task) > ACCEPTABLE, (task, name)


@given(cases())
def test_when_everyone_is_caught_up_actives_are_balanced_and_nothing_warms_up(
    case: Case,
) -> None:
    result = _all_caught_up(case).run()
    assert _balanced(result)
    assert all(not w for w in result.warmup.values())
    assert result.next_probe_ms == NO_PROBE


@given(cases(configs.map(lambda c: replace(c, max_warmup_replicas=0))))
def test_without_a_warmup_budget_actives_are_always_balanced(case: Case) -> None:
    result = case.run()
    assert _balanced(result)
    assert all(not w for w in result.warmup.values())


@given(cases(), st.randoms(use_true_random=False))
def test_same_input_in_any_order_gives_the_same_plan(case: Case, rnd: random.Random) -> None:
    first = case.run()
    tasks, names = list(case.tasks), list(case.clients)
    rnd.shuffle(tasks)
    rnd.shuffle(names)
    shuffled = Case(tasks, {n: case.clients[n] for n in names}, case.config, case.stateless)
    assert shuffled.run() == first
    assert case.run() == first


@given(cases())
def test_nothing_moves_when_membership_is_unchanged_and_everyone_is_caught_up(
    case: Case,
) -> None:
    case = _all_caught_up(case)
    previous = case.run()
    again = _all_caught_up(_next_round(case, previous)).run()
    assert again.active == previous.active
    assert again.standby == previous.standby


@given(cases(), process_ids)
def test_a_caught_up_joining_client_moves_only_the_minimum_number_of_tasks(
    case: Case, newcomer: str
) -> None:
    case = _all_caught_up(case)
    previous = case.run()
    grown = _next_round(case, previous)
    name = "new-" + newcomer
    grown.clients[name] = ClientState(name, lags=dict.fromkeys(case.tasks, 0))
    after = grown.run()

    old, new = _owners(previous), _owners(after)
    assert sum(1 for t, owner in new.items() if old.get(t) != owner) == _fewest_moves(grown)


@given(cases(), st.data())
def test_when_a_client_leaves_only_its_tasks_move(case: Case, data: st.DataObject) -> None:
    case = _all_caught_up(case)
    previous = case.run()
    leaving = data.draw(st.sampled_from(sorted(case.clients)))
    remaining = _next_round(case, previous)
    del remaining.clients[leaving]
    if not remaining.clients:
        return
    old, new = _owners(previous), _owners(remaining.run())
    assert {t for t, owner in new.items() if old[t] != owner} == previous.active[leaving]


@st.composite
def scale_outs(draw: st.DrawFn) -> Case:
    """Some clients own every task and are caught up; the others hold nothing yet."""
    tasks = draw(st.lists(task_ids, min_size=1, max_size=30, unique=True))
    names = draw(st.lists(process_ids, min_size=2, max_size=6, unique=True))
    owners = draw(st.integers(1, len(names) - 1))
    clients = {name: ClientState(name, lags=dict.fromkeys(tasks, 10**9)) for name in names}
    for task in tasks:
        name = names[draw(st.integers(0, owners - 1))]
        clients[name] = replace(clients[name], prev_active=clients[name].prev_active | {task})
    return Case(tasks, clients, draw(configs), frozenset())


def _fewest_moves(case: Case) -> int:
    """How many actives must move at least to balance the group (caps of ``T // N``,
    ``T % N`` of them one more)."""
    base, extra = divmod(len(case.tasks), len(case.clients))
    had = [len(c.prev_active) for c in case.clients.values()]
    kept = sum(min(n, base) for n in had) + min(extra, sum(1 for n in had if n > base))
    return len(case.tasks) - kept


@settings(deadline=None)
@given(scale_outs())
def test_warmups_converge_to_a_balanced_plan_within_bounded_rounds(case: Case) -> None:
    """Every probing rebalance moves a full warmup budget's worth of actives (none wasted
    on warmups that do not become actives), so the plan is balanced with no warmups after
    ceil(fewest moves / max_warmup_replicas) probing rebalances."""
    bound = math.ceil(_fewest_moves(case) / case.config.max_warmup_replicas)
    result = case.run()
    for _round in range(bound + 1):
        if _balanced(result) and all(not w for w in result.warmup.values()):
            break
        case = _next_round(case, result)
        result = case.run()
    else:
        raise AssertionError(f"not converged after {bound} probing rebalances: {result}")
    assert result.next_probe_ms == NO_PROBE
