"""The pure task planner (KIP-441 style): actives, standbys and warmups. No Kafka, no I/O.

The group leader computes each client's lag per task (:mod:`worker.assignment.lags`),
wraps it in :class:`ClientState` objects, calls :func:`plan` and encodes the result.
Keeping the decision pure makes it testable with property tests
(tests/property/test_planner.py) and keeps the protocol adapter thin (style.md habit 3).

:func:`plan` follows these steps (reference/kafka-streams-state.md §4.5, adapted):

a. Caught up. A client is caught up on a task when its lag is at most
   ``acceptable_recovery_lag``; a previous active (``prev_active``) always is. Every
   choice below ranks caught-up clients as equals (KIP-441) and compares lags beyond the
   bound only, so among caught-up clients balance, then the key, decides. Otherwise the
   previous owner of a move, which just ran the task, would outrank the intended
   owner's standby in the follow-up round (step f) and take the task back.
b. Ideal placement, balanced and sticky: with ``T`` tasks and ``N`` clients each client
   gets ``T // N`` actives, ``T % N`` of them one more, so counts differ by at most one.
   b1. Each task's previous owner keeps it, up to ``T // N`` tasks. The previous owner
       is the client claiming it (``prev_active``), else, for a move the last plan
       withheld (``previous_moves``), its intended owner. An owner over quota
       gives up first the tasks that a client with room is least behind on (a caught-up
       alternative that can take it). The ``T % N`` extra slots go to owners over quota,
       those whose next task is hardest to hand over first (then the most previous
       tasks, then key): an owner whose task has a caught-up copy elsewhere hands it
       over, instead of one whose task would need a warmup. Whoever gets the extra
       slots, as many tasks stay put.
   b2. Every other task goes to the client with room that is least behind on it; within
       one rank (caught up, or one lag beyond the bound) the task with the fewest such
       clients goes first, then by TaskId, and each goes to the least loaded of them
       (then the lowest key).
   b3. Tasks every client ranks equally on (stateless, state nobody has, everyone caught
       up) go last, each to the least loaded client with room (ties by key, tasks in
       TaskId order).
c. Recovery guard. Where the ideal client is not caught up on a task while some client
   is, the active goes to a caught-up client instead (the previous owner, else the least
   loaded, then key) and the ideal client gets a **warmup** of it while the group-wide
   budget ``max_warmup_replicas`` lasts (one counter for the whole group, as in
   KIP-441). Tasks with the fewest caught-up clients are handled first, then by TaskId.
   With ``max_warmup_replicas == 0`` this step is skipped: tasks move to their ideal
   client without warming up and restore there (the no-warmup baseline of the scale-out
   benchmark; Kafka Streams itself requires at least 1).
d. Standbys: ``num_standby_replicas`` per stateful task on clients holding neither its
   active nor its warmup, least behind first, then fewest standbys so far, then key;
   as many as there are such clients at most.
e. Probing: when any warmup was placed, ``next_probe_ms = now_ms +
   probing_rebalance_interval_ms`` so the group looks again once warmups had time to
   catch up; otherwise ``NO_PROBE``.
f. Two-phase moves (KIP-429). A task never becomes active on a new client in the
   generation in which another client still owns it (lists it in ``prev_active``): the
   owner must commit and close it first, or both would process and write it. A task
   whose planned client is not one of its claimers is withheld: active nowhere, listed
   in ``Plan.pending_moves`` (task -> intended owner), and, when stateful, a standby of
   the intended owner, which keeps tailing the changelog so that its promotion next
   round restores only the tail (the previous owner keeps a standby only where step d
   gives it one). A stateless task is held by nobody meanwhile. Of several claimers (a
   restarted process whose old member has not expired) the planned client keeps the
   task when it is one of them; the others just lose it. The previous owners revoke and
   ask for the follow-up round, in which nobody claims the task and b1 keeps it on the
   intended owner given ``previous_moves``: the leader's own memory, or, when another
   member planned the previous round, the moves members were told of (those they take
   part in) and echo in their subscriptions (:mod:`worker.kafka.task_assignor`).

g. Leaving clients (a worker stopping on SIGTERM) get nothing: steps b-d plan the other
   clients only, and the tasks a leaving client runs are moves of step f to their new
   owners, which its release hands over in this round. When every client is leaving,
   they are planned as usual.

Same input, same output, whatever order the tasks and clients arrive in: every choice
above ends in a tie-break on the client key and the TaskId.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from worker.assignment.model import NO_PROBE
from worker.assignment.slots import LoadOrder, Slots
from worker.assignment.standing import UNKNOWN_LAG, ClientState, Standing
from worker.assignment.task_id import TaskId

__all__ = ["UNKNOWN_LAG", "ClientState", "Plan", "PlannerConfig", "plan"]


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Kafka Streams' KIP-441 knobs (reference/kafka-streams-state.md §4.1)."""

    num_standby_replicas: int = 0
    max_warmup_replicas: int = 2
    acceptable_recovery_lag: int = 10000
    probing_rebalance_interval_ms: int = 600000


@dataclass(frozen=True, slots=True)
class Plan:
    """The decision: per client key, its active, standby and warmup tasks.

    Every client given to :func:`plan` has an entry in each map (possibly empty).
    ``next_probe_ms`` is the wall-clock time (ms) of the follow-up probing rebalance,
    ``NO_PROBE`` when no warmup needs one. ``pending_moves`` maps each task withheld
    this round (step f of the module doc) to the client meant to run it after the
    follow-up round; such a task is active nowhere, and its intended client holds it in
    ``standby`` when it is stateful.
    """

    active: Mapping[str, frozenset[TaskId]]
    standby: Mapping[str, frozenset[TaskId]]
    warmup: Mapping[str, frozenset[TaskId]]
    next_probe_ms: int = NO_PROBE
    pending_moves: Mapping[TaskId, str] = field(default_factory=dict)

    def owner_of(self, task: TaskId) -> str | None:
        """The client running ``task`` as active, or None when it is unassigned or pending."""
        for client, tasks in self.active.items():
            if task in tasks:
                return client
        return None


def plan(
    tasks: Sequence[TaskId],
    clients: Mapping[str, ClientState],
    config: PlannerConfig,
    now_ms: int,
    stateless: Collection[TaskId] = frozenset(),
    previous_moves: Mapping[TaskId, str] | None = None,
    unreported_lags: Mapping[TaskId, int] | None = None,
    leaving: Collection[str] = frozenset(),
) -> Plan:
    """Place every task as active on at most one client, plus standbys and warmups.

    Every task is either active on exactly one client or in ``pending_moves`` (step f).
    ``clients`` is keyed by the id the result should use (normally the process id);
    ``now_ms`` is the leader's wall clock, only used for ``next_probe_ms``. Tasks in
    ``stateless`` have no state: every client counts as caught up on them and they get
    no standbys or warmups. ``previous_moves`` is the ``pending_moves`` of the plan
    before this one, when the caller still has it: the follow-up round then completes
    those moves (step b1). ``unreported_lags`` is the lag of a client whose ``lags``
    have no entry for a task (:class:`worker.assignment.lags.TaskLags`: the whole
    changelog); a task missing there counts as ``UNKNOWN_LAG``. ``leaving`` names the
    clients that get nothing (step g). So each client need list
    only the tasks it holds state for, and a plan costs time in proportion to the
    tasks, the clients and their reports, never to tasks times clients. With no clients
    the plan is empty. See the module doc.
    """
    names = sorted(clients)
    if not names:
        return Plan({}, {}, {})
    staying = {n: c for n, c in clients.items() if n not in leaving} or clients
    unreported = unreported_lags or {}
    group = Standing(staying, config.acceptable_recovery_lag, stateless, unreported)
    everyone = group if staying is clients else Standing(clients, 0, stateless, unreported)
    all_tasks = sorted(set(tasks))
    owners = _previous_owners(all_tasks, group, previous_moves or {})
    ideal = _ideal_placement(all_tasks, group, owners)
    active, warmup = _guard_recovery(all_tasks, ideal, group, owners, config)
    standby = _place_standbys(all_tasks, active, warmup, group, config.num_standby_replicas)
    pending = _withhold_moves(active, standby, everyone)
    probe = now_ms + config.probing_rebalance_interval_ms if warmup else NO_PROBE
    return Plan(
        _by_client(names, active.items()),
        _by_client(names, ((t, c) for t, cs in standby.items() for c in cs)),
        _by_client(names, warmup.items()),
        probe,
        pending,
    )


def _previous_owners(
    tasks: Sequence[TaskId], group: Standing, previous_moves: Mapping[TaskId, str]
) -> dict[TaskId, str]:
    """The one previous owner per task (step b1); a task claimed by several goes to the
    lowest key. Two claims happen only when a process restarted before its old member
    expired. A previous move counts only while nobody claims its task and its target
    still holds the standby it was given: otherwise the leader's memory is stale."""
    owners: dict[TaskId, str] = {}
    known = set(tasks)
    for name in group.names:
        for task in sorted(group.clients[name].prev_active & known):
            owners.setdefault(task, name)
    for task, target in previous_moves.items():
        if task not in known or task in owners or target not in group.clients:
            continue
        if task in group.stateless or task in group.clients[target].prev_standby:
            owners[task] = target
    return owners


def _ideal_placement(
    tasks: Sequence[TaskId], group: Standing, owners: Mapping[TaskId, str]
) -> dict[TaskId, str]:
    """Step b: a balanced, sticky placement that ignores whether anyone is caught up."""
    slots = Slots(group.names, len(tasks))
    free = _keep_previous(tasks, group, owners, slots)
    indifferent = [t for t in free if _indifferent(t, group)]
    skip = set(indifferent)
    _place_by_lag([t for t in free if t not in skip], group, slots)
    for task in indifferent:  # b3
        name = slots.least_loaded_except(())
        assert name is not None, "the caps add up to the task count"
        slots.take(name, task)
    return {task: name for name, placed in slots.placed.items() for task in placed}


def _indifferent(task: TaskId, group: Standing) -> bool:
    """Whether every client ranks the same on ``task`` (step b3)."""
    known = group.known_ranks(task)
    ranks = set(known.values())
    if len(known) < len(group.names):
        ranks.add(group.default_rank(task))
    return len(ranks) == 1


def _keep_previous(
    tasks: Sequence[TaskId], group: Standing, owners: Mapping[TaskId, str], slots: Slots
) -> list[TaskId]:
    """Step b1. Returns the tasks left to place, in TaskId order."""
    owned: dict[str, list[TaskId]] = {name: [] for name in group.names}
    for task, name in owners.items():
        owned[name].append(task)
    handover = _Handover(group, _receivers(owned, slots))
    for name, previous in owned.items():
        owned[name] = sorted(previous, key=lambda t: (-handover.cost(t), t))
    kept: set[TaskId] = set()
    for name, previous in owned.items():
        for task in previous[: slots.base]:
            slots.take(name, task)
            kept.add(task)
    over = {n: previous[slots.base] for n, previous in owned.items() if len(previous) > slots.base}
    for name in sorted(over, key=lambda n: (-handover.cost(over[n]), -len(owned[n]), n)):
        if slots.can_take(name):
            slots.take(name, over[name])
            kept.add(over[name])
    return [task for task in tasks if task not in kept]


def _receivers(owned: Mapping[str, Sequence[TaskId]], slots: Slots) -> list[str]:
    """The clients that will take tasks over: those below ``T // N``, and those at it
    when extra slots remain after every owner over ``T // N`` kept one. The state of a
    client that gets nothing does not make a task cheap to hand over."""
    base = slots.base
    over = sum(1 for tasks in owned.values() if len(tasks) > base)
    limit = base + 1 if slots.extra_left > over else base
    return [name for name, tasks in owned.items() if len(tasks) < limit]


class _Handover:
    """How far behind the best client that could take a task over is (lower: cheaper;
    0 when one is caught up)."""

    def __init__(self, group: Standing, receivers: Sequence[str]) -> None:
        self._group = group
        self._receivers = frozenset(receivers)

    def cost(self, task: TaskId) -> int:
        ranks = [r for n, r in self._group.known_ranks(task).items() if n in self._receivers]
        if len(ranks) < len(self._receivers):  # a receiver without a report
            ranks.append(self._group.default_rank(task))
        return min(ranks, default=UNKNOWN_LAG)


def _place_by_lag(free: Sequence[TaskId], group: Standing, slots: Slots) -> None:
    """Step b2: walk (rank, task, candidate clients) from the smallest rank up.

    Room only shrinks as tasks are placed, so when a task's turn comes at its largest
    rank every client still with room is offered: every task gets placed. A task's
    candidates at its default rank (every client that does not report it, plus those
    that report the same rank) are held as the few clients left out, not as a list.
    """
    levels: dict[int, list[tuple[int, TaskId, list[str] | None, frozenset[str]]]] = {}
    everyone = len(group.names)
    for task in free:
        known = group.known_ranks(task)
        default = group.default_rank(task)
        others = everyone - len(known)
        by_rank: dict[int, list[str]] = {}
        for name, rank in known.items():
            by_rank.setdefault(rank, []).append(name)
        for rank, holders in by_rank.items():
            if not (rank == default and others):
                levels.setdefault(rank, []).append((len(holders), task, holders, frozenset()))
        if others:
            left_out = frozenset(n for n, rank in known.items() if rank != default)
            levels.setdefault(default, []).append((everyone - len(left_out), task, None, left_out))
    placed: set[TaskId] = set()
    for rank in sorted(levels):
        for _size, task, names, left_out in sorted(levels[rank], key=lambda c: (c[0], c[1])):
            if task in placed:
                continue
            if names is None:
                chosen = slots.least_loaded_except(left_out)
            else:
                chosen = slots.least_loaded(names)
            if chosen is not None:
                slots.take(chosen, task)
                placed.add(task)


def _guard_recovery(
    tasks: Sequence[TaskId],
    ideal: Mapping[TaskId, str],
    group: Standing,
    owners: Mapping[TaskId, str],
    config: PlannerConfig,
) -> tuple[dict[TaskId, str], dict[TaskId, str]]:
    """Step c: (task -> active client, task -> warmup client)."""
    active = dict(ideal)
    warmup: dict[TaskId, str] = {}
    if config.max_warmup_replicas == 0:
        return active, warmup
    caught_up: dict[TaskId, list[str]] = {}
    for task in tasks:
        if not group.caught_up(ideal[task], task):
            caught_up[task] = group.caught_up_clients(task)
    moves = [t for t in caught_up if caught_up[t]]
    moves.sort(key=lambda t: (len(caught_up[t]), t))
    load = {name: 0 for name in group.names}
    for name in ideal.values():
        load[name] += 1
    budget = config.max_warmup_replicas
    for task in moves:
        target = ideal[task]
        chosen = _stand_in(caught_up[task], owners.get(task), load)
        active[task] = chosen
        load[target] -= 1
        load[chosen] += 1
        if budget > 0:
            warmup[task] = target
            budget -= 1
    return active, warmup


def _stand_in(caught_up: Sequence[str], owner: str | None, load: Mapping[str, int]) -> str:
    """The caught-up client that runs a task while its ideal client warms up: its owner,
    which runs it already, else the least loaded (caught-up clients rank equal)."""
    return min(caught_up, key=lambda n: (n != owner, load[n], n))


def _place_standbys(
    tasks: Sequence[TaskId],
    active: Mapping[TaskId, str],
    warmup: Mapping[TaskId, str],
    group: Standing,
    replicas: int,
) -> dict[TaskId, list[str]]:
    """Step d: task -> its standby clients.

    Least behind first (least to restore on failover; caught-up clients rank equal, so
    the standby load is balanced among them), then fewest standbys, then key. Of the
    clients that do not report a task (all of one rank) only the ``replicas`` with the
    fewest standbys can be chosen, so only they are compared with the reporters.
    """
    standby: dict[TaskId, list[str]] = {}
    if replicas <= 0:
        return standby
    count = LoadOrder(group.names)
    for task in tasks:
        if task in group.stateless:
            continue
        taken = {active[task], *([warmup[task]] if task in warmup else [])}
        known = group.known_ranks(task)
        order = [(r, count.load(n), n) for n, r in known.items() if n not in taken]
        default = group.default_rank(task)
        for name in count.smallest(replicas, skip={*taken, *known}):
            order.append((default, count.load(name), name))
        standby[task] = [name for _, _, name in sorted(order)[:replicas]]
        for name in standby[task]:
            count.bump(name)
    return standby


def _withhold_moves(
    active: dict[TaskId, str], standby: dict[TaskId, list[str]], group: Standing
) -> dict[TaskId, str]:
    """Step f: take every move to a new owner out of ``active`` (in place), give the
    intended owner a standby of it when stateful, and return task -> intended owner.
    ``group`` holds every client, leaving ones included: their claims count too."""
    pending: dict[TaskId, str] = {}
    for task, planned in sorted(active.items()):
        claimers = group.claimers(task)
        if not claimers or planned in claimers:
            continue
        pending[task] = planned
        del active[task]
        if task not in group.stateless:
            standby.setdefault(task, []).append(planned)
    return pending


def _by_client(
    names: Sequence[str], placements: Iterable[tuple[TaskId, str]]
) -> dict[str, frozenset[TaskId]]:
    grouped: dict[str, set[TaskId]] = {name: set() for name in names}
    for task, name in placements:
        grouped[name].add(task)
    return {name: frozenset(tasks) for name, tasks in grouped.items()}
