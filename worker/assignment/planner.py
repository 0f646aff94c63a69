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
   member planned the previous round, the moves every assignment carries and members
   echo in their subscriptions (:mod:`worker.kafka.task_assignor`).

Same input, same output, whatever order the tasks and clients arrive in: every choice
above ends in a tie-break on the client key and the TaskId.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from worker.assignment.model import NO_PROBE
from worker.assignment.task_id import TaskId

# The lag of a client that reports nothing and has no lag entry: behind everyone.
UNKNOWN_LAG = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ClientState:
    """What the leader knows about one client (one worker process) at this rebalance.

    ``lags`` maps a task to how many changelog records the client is behind on it
    (:func:`worker.assignment.lags.task_lags`); a task missing from it counts as
    ``UNKNOWN_LAG``. A task in ``prev_active`` always counts as lag 0.
    """

    process_id: str
    prev_active: frozenset[TaskId] = frozenset()
    prev_standby: frozenset[TaskId] = frozenset()
    lags: Mapping[TaskId, int] = field(default_factory=dict)

    def lag(self, task: TaskId) -> int:
        if task in self.prev_active:
            return 0
        return self.lags.get(task, UNKNOWN_LAG)


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
) -> Plan:
    """Place every task as active on at most one client, plus standbys and warmups.

    Every task is either active on exactly one client or in ``pending_moves`` (step f).
    ``clients`` is keyed by the id the result should use (normally the process id);
    ``now_ms`` is the leader's wall clock, only used for ``next_probe_ms``. Tasks in
    ``stateless`` have no state: every client counts as caught up on them and they get
    no standbys or warmups. ``previous_moves`` is the ``pending_moves`` of the plan
    before this one, when the caller still has it: the follow-up round then completes
    those moves (step b1). With no clients the plan is empty. See the module doc.
    """
    names = sorted(clients)
    if not names:
        return Plan({}, {}, {})
    group = _Group(clients, config, stateless)
    all_tasks = sorted(set(tasks))
    owners = _previous_owners(all_tasks, group, previous_moves or {})
    ideal = _ideal_placement(all_tasks, group, owners)
    active, warmup = _guard_recovery(all_tasks, ideal, group, owners, config)
    standby = _place_standbys(all_tasks, active, warmup, group, config.num_standby_replicas)
    pending = _withhold_moves(active, standby, group)
    probe = now_ms + config.probing_rebalance_interval_ms if warmup else NO_PROBE
    return Plan(
        _by_client(names, active.items()),
        _by_client(names, ((t, c) for t, cs in standby.items() for c in cs)),
        _by_client(names, warmup.items()),
        probe,
        pending,
    )


class _Group:
    """Step a: the clients, their lags and who is caught up. Read-only during a plan."""

    def __init__(
        self, clients: Mapping[str, ClientState], config: PlannerConfig, stateless: Iterable[TaskId]
    ) -> None:
        self.names = sorted(clients)
        self.clients = clients
        self.stateless = frozenset(stateless)
        self.acceptable = config.acceptable_recovery_lag

    def lag(self, name: str, task: TaskId) -> int:
        return 0 if task in self.stateless else self.clients[name].lag(task)

    def caught_up(self, name: str, task: TaskId) -> bool:
        return self.lag(name, task) <= self.acceptable

    def rank(self, name: str, task: TaskId) -> int:
        """How far behind for ordering: 0 when caught up (all equal), else the lag."""
        lag = self.lag(name, task)
        return 0 if lag <= self.acceptable else lag

    def claimers(self, task: TaskId) -> list[str]:
        """The clients that run ``task`` as active now (more than one only after a restart)."""
        return [name for name in self.names if task in self.clients[name].prev_active]

    def caught_up_clients(self, task: TaskId) -> list[str]:
        return [name for name in self.names if self.caught_up(name, task)]


class _Slots:
    """Step b's balance caps: ``T // N`` per client, and ``T % N`` of them one more.

    Whoever fills the slots, the caps add up to exactly ``T``, so placing every task
    within them always succeeds and always ends balanced.
    """

    def __init__(self, names: Sequence[str], task_count: int) -> None:
        self.base, self.extra_left = divmod(task_count, len(names))
        self.placed: dict[str, set[TaskId]] = {name: set() for name in names}

    def can_take(self, name: str) -> bool:
        count = len(self.placed[name])
        return count < self.base or (count == self.base and self.extra_left > 0)

    def take(self, name: str, task: TaskId) -> None:
        if len(self.placed[name]) == self.base:
            self.extra_left -= 1
        self.placed[name].add(task)

    def least_loaded(self, names: Iterable[str]) -> str | None:
        roomy = [n for n in names if self.can_take(n)]
        return min(roomy, key=lambda n: (len(self.placed[n]), n)) if roomy else None


def _previous_owners(
    tasks: Sequence[TaskId], group: _Group, previous_moves: Mapping[TaskId, str]
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
    tasks: Sequence[TaskId], group: _Group, owners: Mapping[TaskId, str]
) -> dict[TaskId, str]:
    """Step b: a balanced, sticky placement that ignores whether anyone is caught up."""
    slots = _Slots(group.names, len(tasks))
    free = _keep_previous(tasks, group, owners, slots)
    indifferent = [t for t in free if len({group.rank(n, t) for n in group.names}) == 1]
    skip = set(indifferent)
    _place_by_lag([t for t in free if t not in skip], group, slots)
    for task in indifferent:  # b3
        name = slots.least_loaded(group.names)
        assert name is not None, "the caps add up to the task count"
        slots.take(name, task)
    return {task: name for name, placed in slots.placed.items() for task in placed}


def _keep_previous(
    tasks: Sequence[TaskId], group: _Group, owners: Mapping[TaskId, str], slots: _Slots
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


def _receivers(owned: Mapping[str, Sequence[TaskId]], slots: _Slots) -> list[str]:
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

    def __init__(self, group: _Group, receivers: Sequence[str]) -> None:
        self._group = group
        self._receivers = receivers

    def cost(self, task: TaskId) -> int:
        lags = (self._group.rank(n, task) for n in self._receivers)
        return min(lags, default=UNKNOWN_LAG)


def _place_by_lag(free: Sequence[TaskId], group: _Group, slots: _Slots) -> None:
    """Step b2: walk (rank, task, client) pairs from the smallest rank up.

    Room only shrinks as tasks are placed, so when a task's turn comes at its largest
    lag every client still with room is offered: every task gets placed.
    """
    pairs = sorted((group.rank(n, t), t, n) for t in free for n in group.names)
    placed: set[TaskId] = set()
    for _rank, level in groupby(pairs, key=lambda p: p[0]):
        candidates: dict[TaskId, list[str]] = {}
        for _, task, name in level:
            candidates.setdefault(task, []).append(name)
        for task in sorted(candidates, key=lambda t: (len(candidates[t]), t)):
            if task in placed:
                continue
            chosen = slots.least_loaded(candidates[task])
            if chosen is not None:
                slots.take(chosen, task)
                placed.add(task)


def _guard_recovery(
    tasks: Sequence[TaskId],
    ideal: Mapping[TaskId, str],
    group: _Group,
    owners: Mapping[TaskId, str],
    config: PlannerConfig,
) -> tuple[dict[TaskId, str], dict[TaskId, str]]:
    """Step c: (task -> active client, task -> warmup client)."""
    active = dict(ideal)
    warmup: dict[TaskId, str] = {}
    if config.max_warmup_replicas == 0:
        return active, warmup
    caught_up = {t: group.caught_up_clients(t) for t in tasks}
    moves = [t for t in tasks if caught_up[t] and not group.caught_up(ideal[t], t)]
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
    group: _Group,
    replicas: int,
) -> dict[TaskId, list[str]]:
    """Step d: task -> its standby clients."""
    standby: dict[TaskId, list[str]] = {}
    if replicas <= 0:
        return standby
    count = {name: 0 for name in group.names}
    for task in tasks:
        if task in group.stateless:
            continue
        taken = {active[task], warmup.get(task)}
        eligible = [n for n in group.names if n not in taken]
        standby[task] = _standby_order(task, eligible, group, count)[:replicas]
        for name in standby[task]:
            count[name] += 1
    return standby


def _standby_order(
    task: TaskId, eligible: Iterable[str], group: _Group, count: Mapping[str, int]
) -> list[str]:
    """Least behind first (least to restore on failover; caught-up clients rank equal, so
    the standby load is balanced among them), then fewest standbys, then key."""
    return sorted(eligible, key=lambda n: (group.rank(n, task), count[n], n))


def _withhold_moves(
    active: dict[TaskId, str], standby: dict[TaskId, list[str]], group: _Group
) -> dict[TaskId, str]:
    """Step f: take every move to a new owner out of ``active`` (in place), give the
    intended owner a standby of it when stateful, and return task -> intended owner."""
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
