"""Invariants of the pure planner over random groups.

On failure hypothesis prints the falsifying example and the ``@reproduce_failure`` blob
that replays it (``print_blob``); ``--hypothesis-seed`` replays a whole run. The
multi-round simulations put every round's plan in their assertion messages.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

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
# How far a standby, warmup or withheld move's target is behind at the next round.
standby_lags = st.integers(0, ACCEPTABLE - 1)
configs = st.builds(
    PlannerConfig,
    num_standby_replicas=st.integers(0, 2),
    max_warmup_replicas=st.integers(1, 3),
    acceptable_recovery_lag=st.just(ACCEPTABLE),
    probing_rebalance_interval_ms=st.just(60_000),
)
prints_blob = settings(print_blob=True)
multi_round = settings(prints_blob, deadline=None)


@dataclass(frozen=True)
class Case:
    tasks: list[TaskId]
    clients: dict[str, ClientState]
    config: PlannerConfig
    stateless: frozenset[TaskId]
    # The leader's memory: the pending moves of the plan before this one.
    moves: Mapping[TaskId, str] = field(default_factory=dict)

    def run(self) -> Plan:
        return plan(self.tasks, self.clients, self.config, NOW, self.stateless, self.moves)


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
    # A leader's memory of the last plan's moves, mostly stale here: some targets left.
    targets = st.sampled_from([*names, "gone"])
    moves = draw(st.dictionaries(st.sampled_from(tasks), targets, max_size=4)) if tasks else {}
    return Case(tasks, clients, draw(config), stateless, moves)


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


def _intended(result: Plan) -> dict[TaskId, str]:
    """Where the plan wants each task: its active client, or its pending move's target."""
    owners = _owners(result)
    assert not owners.keys() & result.pending_moves.keys(), result
    return {**owners, **result.pending_moves}


def _holders(roles: Mapping[str, frozenset[TaskId]], task: TaskId) -> list[str]:
    return [name for name, tasks in roles.items() if task in tasks]


def _balanced(placement: Mapping[TaskId, str], names: list[str]) -> bool:
    counts = dict.fromkeys(names, 0)
    for name in placement.values():
        counts[name] += 1
    return max(counts.values()) - min(counts.values()) <= 1


def _next_round(case: Case, result: Plan, standby_lag: int = 0) -> Case:
    """The same clients at the next rebalance, once each has applied ``result``; the
    leader remembers ``result``'s pending moves.

    Each claims the actives it was given; every standby, warmup and withheld move's
    standby it holds is ``standby_lag`` behind; an active it lost is 0 behind (it ran
    it until the revocation: the previous owner is as caught up as anyone); other lags
    stay as they were.
    """
    clients = {}
    for name, client in case.clients.items():
        kept = result.standby[name] | result.warmup[name]
        lost = client.prev_active - result.active[name]
        clients[name] = ClientState(
            name,
            result.active[name],
            kept,
            {
                **client.lags,
                **dict.fromkeys(lost, 0),
                **dict.fromkeys(kept, standby_lag),
                **dict.fromkeys(result.active[name], 0),
            },
        )
    return replace(case, clients=clients, moves=result.pending_moves)


def _rounds(case: Case, count: int, standby_lag: int) -> tuple[Case, list[Plan]]:
    """``count`` rebalances of an unchanged group: the last round's case and every plan."""
    plans = [case.run()]
    for _ in range(count - 1):
        case = _next_round(case, plans[-1], standby_lag)
        plans.append(case.run())
    return case, plans


@prints_blob
@given(cases())
def test_every_task_is_active_on_exactly_one_client_or_pending_a_move(case: Case) -> None:
    result = case.run()
    assert set(result.active) == set(result.standby) == set(result.warmup) == set(case.clients)
    assert set(_intended(result)) == set(case.tasks)
    assert set(result.pending_moves.values()) <= set(case.clients)


@prints_blob
@given(cases())
def test_no_task_becomes_active_on_a_new_client_while_another_still_claims_it(
    case: Case,
) -> None:
    result = case.run()
    for task, owner in _owners(result).items():
        claimers = {n for n, c in case.clients.items() if task in c.prev_active}
        assert not claimers or owner in claimers, (task, owner, claimers)
    for task in result.pending_moves:
        assert any(task in c.prev_active for c in case.clients.values()), task


@prints_blob
@given(cases())
def test_a_withheld_move_leaves_a_standby_on_its_target_only_when_stateful(case: Case) -> None:
    result = case.run()
    for task, target in result.pending_moves.items():
        assert (task in result.standby[target]) == (task not in case.stateless), (task, target)
        if task in case.stateless:
            assert not _holders(result.standby, task), task


@prints_blob
@given(cases())
def test_no_client_holds_two_roles_for_one_task(case: Case) -> None:
    result = case.run()
    for name in case.clients:
        active, standby, warmup = result.active[name], result.standby[name], result.warmup[name]
        assert not (active & standby or active & warmup or standby & warmup), name


@prints_blob
@given(cases())
def test_standbys_per_task_are_as_many_as_configured_and_the_group_allows(case: Case) -> None:
    """Plus the withheld move's target, which holds a standby until the follow-up round."""
    result = case.run()
    for task in case.tasks:
        warmups = len(_holders(result.warmup, task))
        expected = min(case.config.num_standby_replicas, len(case.clients) - 1 - warmups)
        expected += 1 if task in result.pending_moves else 0
        if task in case.stateless:
            expected = 0
        assert len(_holders(result.standby, task)) == expected, task


@prints_blob
@given(cases())
def test_warmups_stay_within_the_group_budget_and_schedule_one_probe(case: Case) -> None:
    result = case.run()
    total = sum(len(w) for w in result.warmup.values())
    assert total <= case.config.max_warmup_replicas
    expected = NOW + case.config.probing_rebalance_interval_ms if total else NO_PROBE
    assert result.next_probe_ms == expected


@prints_blob
@given(cases())
def test_no_active_is_placed_beyond_the_recovery_lag_when_a_caught_up_client_exists(
    case: Case,
) -> None:
    result = case.run()
    group = {name: client for name, client in case.clients.items()}
    for task, owner in _intended(result).items():
        if task in case.stateless:
            continue
        caught_up = [n for n, c in group.items() if c.lag(task) <= ACCEPTABLE]
        if caught_up:
            assert owner in caught_up, (task, owner, caught_up)
        for name in _holders(result.warmup, task):
            assert group[name].lag(task) > ACCEPTABLE, (task, name)


@prints_blob
@given(cases())
def test_when_everyone_is_caught_up_the_plan_is_balanced_and_nothing_warms_up(
    case: Case,
) -> None:
    result = _all_caught_up(case).run()
    assert _balanced(_intended(result), list(case.clients))
    assert all(not w for w in result.warmup.values())
    assert result.next_probe_ms == NO_PROBE


@prints_blob
@given(cases(configs.map(lambda c: replace(c, max_warmup_replicas=0))))
def test_without_a_warmup_budget_the_plan_is_always_balanced(case: Case) -> None:
    result = case.run()
    assert _balanced(_intended(result), list(case.clients))
    assert all(not w for w in result.warmup.values())


@prints_blob
@given(cases(), st.randoms(use_true_random=False))
def test_same_input_in_any_order_gives_the_same_plan(case: Case, rnd: random.Random) -> None:
    first = case.run()
    tasks, names = list(case.tasks), list(case.clients)
    rnd.shuffle(tasks)
    rnd.shuffle(names)
    clients = {n: case.clients[n] for n in names}
    shuffled = Case(tasks, clients, case.config, case.stateless, case.moves)
    assert shuffled.run() == first
    assert case.run() == first


@prints_blob
@given(cases(), st.data())
def test_reports_plus_an_unreported_lag_per_task_plan_like_the_full_table(
    case: Case, data: st.DataObject
) -> None:
    """What the leader passes (each client's reports, one lag for everyone else per
    task) decides exactly as a table with every client's lag on every task."""
    unreported = {t: data.draw(lags, label=str(t)) for t in case.tasks}
    table = {name: replace(c, lags={**unreported, **c.lags}) for name, c in case.clients.items()}
    sparse = plan(
        case.tasks, case.clients, case.config, NOW, case.stateless, case.moves, unreported
    )
    assert sparse == replace(case, clients=table).run()


@multi_round
@given(cases(), standby_lags)
def test_a_withheld_task_is_active_on_its_target_in_the_follow_up_round(
    case: Case, standby_lag: int
) -> None:
    """Whatever the lags, and although the previous owner is as caught up as the target."""
    first = case.run()
    second = _next_round(case, first, standby_lag).run()
    for task, target in first.pending_moves.items():
        assert task in second.active[target], (task, target, first, second)


@multi_round
@given(cases(), standby_lags)
def test_with_everyone_caught_up_the_plan_is_a_fixed_point_after_two_rounds(
    case: Case, standby_lag: int
) -> None:
    """Arbitrary claims (double claims included) settle in one move round plus the
    follow-up round; after that nothing moves while the membership stays the same."""
    _case, plans = _rounds(_all_caught_up(case), 3, standby_lag)
    assert plans[2] == plans[1], plans
    assert not plans[1].pending_moves, plans


@st.composite
def membership_changes(draw: st.DrawFn) -> tuple[Case, int, str | None, str | None]:
    """A settled, caught-up group, then one client joins (caught up) or one leaves."""
    case = _all_caught_up(draw(cases()))
    standby_lag = draw(standby_lags)
    if draw(st.booleans()):
        joining = "new-" + draw(process_ids)
        return case, standby_lag, joining, None
    return case, standby_lag, None, draw(st.sampled_from(sorted(case.clients)))


@multi_round
@given(membership_changes())
def test_after_a_membership_change_the_plan_settles_within_two_rounds_moving_each_task_once(
    change: tuple[Case, int, str | None, str | None],
) -> None:
    case, standby_lag, joining, leaving = change
    case, settled = _rounds(case, 3, standby_lag)
    changed = _next_round(case, settled[-1], standby_lag)
    clients = dict(changed.clients)
    if joining is not None:
        clients[joining] = ClientState(joining, lags=dict.fromkeys(case.tasks, standby_lag))
    if leaving is not None:
        del clients[leaving]
        if not clients:
            return
    _final, plans = _rounds(replace(changed, clients=clients), 3, standby_lag)
    assert plans[2] == plans[1], (joining, leaving, plans)
    withheld = [task for p in plans for task in p.pending_moves]
    assert len(withheld) == len(set(withheld)), (joining, leaving, plans)
    assert _intended(plans[0]) == _owners(plans[1]), (joining, leaving, plans)


@prints_blob
@given(cases(), process_ids)
def test_a_caught_up_joining_client_moves_only_the_minimum_number_of_tasks(
    case: Case, newcomer: str
) -> None:
    case, plans = _rounds(_all_caught_up(case), 2, 0)
    grown = _next_round(case, plans[-1])
    name = "new-" + newcomer
    grown.clients[name] = ClientState(name, lags=dict.fromkeys(case.tasks, 0))
    after = grown.run()

    old, new = _owners(plans[-1]), _intended(after)
    assert sum(1 for t, owner in new.items() if old.get(t) != owner) == _fewest_moves(grown)


@prints_blob
@given(cases(), st.data())
def test_when_a_client_leaves_only_its_tasks_move(case: Case, data: st.DataObject) -> None:
    case, plans = _rounds(_all_caught_up(case), 2, 0)
    previous = plans[-1]
    leaving = data.draw(st.sampled_from(sorted(case.clients)))
    remaining = _next_round(case, previous)
    del remaining.clients[leaving]
    if not remaining.clients:
        return
    after = remaining.run()
    old, new = _owners(previous), _intended(after)
    assert {t for t, owner in new.items() if old[t] != owner} == previous.active[leaving]
    assert not after.pending_moves, "nobody claims a task of the client that left"


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


@multi_round
@given(scale_outs())
def test_warmups_converge_to_a_balanced_plan_within_bounded_rounds(case: Case) -> None:
    """Every probing rebalance moves a full warmup budget's worth of actives (none wasted
    on warmups that do not become actives), so the plan is balanced with no warmups after
    ceil(fewest moves / max_warmup_replicas) probing rebalances, plus the follow-up round
    of the last two-phase moves."""
    bound = math.ceil(_fewest_moves(case) / case.config.max_warmup_replicas) + 1
    names = list(case.clients)
    result = case.run()
    for _round in range(bound + 1):
        settled = not result.pending_moves and all(not w for w in result.warmup.values())
        if settled and _balanced(_owners(result), names):
            break
        case = _next_round(case, result)
        result = case.run()
    else:
        raise AssertionError(f"not converged after {bound} rebalances: {result}")
    assert result.next_probe_ms == NO_PROBE
