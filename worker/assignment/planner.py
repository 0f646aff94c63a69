"""The pure task planner: which client runs which task. No Kafka, no clocks, no I/O.

The group leader turns member subscriptions into :class:`ClientState` objects, calls
:func:`plan` and encodes the result. Keeping the decision pure makes it testable with
property tests (tests/property/test_planner.py) and keeps the protocol adapter thin
(style.md habit 3).

Active placement, in numbered steps that :func:`plan` follows:

1. Balance. With ``T`` tasks and ``N`` clients every client ends with ``T // N`` actives
   and ``T % N`` of them with one more, so counts differ by at most one. Which clients
   get the extra slots is not fixed up front: steps 2-4 claim them as they go.
2. Stickiness. Each task's previous owner (a client listing it in ``prev_active``; if
   several do, the one with the most local state, then the lowest process id) keeps its
   lowest tasks up to ``T // N``; the extra slots then go to the owners with the most
   previous tasks (ties by process id). That keeps the most tasks where they are.
3. Local state. Every other task goes to a client with room holding the most local
   state for it: ``LATEST_OFFSET`` (-2, a running active) ranks above any offset sum, a
   higher offset sum above a lower one. Pairs are taken best first, ties by TaskId then
   process id.
4. The rest go to the least loaded client with room (ties by process id).

Same input, same output, whatever order the tasks and clients arrive in. Recovery lag,
warmups and standbys are another issue's work; the :class:`Plan` already carries them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from worker.assignment.model import LATEST_OFFSET
from worker.assignment.task_id import TaskId

# A running active counts as more local state than any real offset sum.
_RUNNING_SCORE = 2**63
_NO_STATE = -1


@dataclass(frozen=True, slots=True)
class ClientState:
    """What the leader knows about one client (one worker process) at this rebalance."""

    process_id: str
    prev_active: frozenset[TaskId] = frozenset()
    prev_standby: frozenset[TaskId] = frozenset()
    offset_sums: Mapping[TaskId, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Kafka Streams' KIP-441 knobs (reference/kafka-streams-state.md §4.1)."""

    num_standby_replicas: int = 0
    max_warmup_replicas: int = 2
    acceptable_recovery_lag: int = 10000


@dataclass(frozen=True, slots=True)
class Plan:
    """The decision: per process id, its active, standby and warmup tasks.

    Every client given to :func:`plan` has an entry in each map (possibly empty).
    """

    active: Mapping[str, frozenset[TaskId]]
    standby: Mapping[str, frozenset[TaskId]]
    warmup: Mapping[str, frozenset[TaskId]]

    def owner_of(self, task: TaskId) -> str | None:
        """The process id running ``task`` as active, or None when it is unassigned."""
        for client, tasks in self.active.items():
            if task in tasks:
                return client
        return None


def plan(
    tasks: Sequence[TaskId], clients: Mapping[str, ClientState], config: PlannerConfig
) -> Plan:
    """Place every task as active on exactly one client, balanced and sticky (see module doc).

    ``clients`` is keyed by the id the result should use (normally the process id). With
    no clients the plan is empty and every task is unassigned.
    """
    del config  # standbys and warmups come with the HA issue; actives ignore the knobs
    names = sorted(clients)
    if not names:
        return Plan({}, {}, {})
    all_tasks = sorted(set(tasks))
    slots = _Slots(names, len(all_tasks))
    free = _keep_previous(all_tasks, clients, slots)
    free = _place_by_state(free, clients, slots)
    _place_rest(free, slots)
    empty: dict[str, frozenset[TaskId]] = {name: frozenset() for name in names}
    active = {name: frozenset(slots.placed[name]) for name in names}
    return Plan(active, dict(empty), dict(empty))


def state_score(client: ClientState, task: TaskId) -> int:
    """How much local state ``client`` holds for ``task``: higher is better, -1 is none."""
    offset_sum = client.offset_sums.get(task)
    if offset_sum is None:
        return _NO_STATE
    if offset_sum == LATEST_OFFSET:
        return _RUNNING_SCORE
    return offset_sum if offset_sum >= 0 else _NO_STATE


class _Slots:
    """Step 1: the balance caps. ``T // N`` per client, and ``T % N`` of them one more.

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


def _previous_owners(
    tasks: Sequence[TaskId], clients: Mapping[str, ClientState]
) -> dict[str, list[TaskId]]:
    """Each client's previous tasks (sorted); a task claimed twice goes to the most state."""
    owners: dict[TaskId, str] = {}
    known = set(tasks)
    for name in sorted(clients):
        for task in clients[name].prev_active & known:
            current = owners.get(task)
            if current is None or state_score(clients[name], task) > state_score(
                clients[current], task
            ):
                owners[task] = name
    owned: dict[str, list[TaskId]] = {name: [] for name in clients}
    for task in sorted(owners):
        owned[owners[task]].append(task)
    return owned


def _keep_previous(
    tasks: Sequence[TaskId], clients: Mapping[str, ClientState], slots: _Slots
) -> list[TaskId]:
    """Step 2: owners keep their lowest tasks up to ``T // N``, then the extra slots go to
    the owners with the most previous tasks. Returns the tasks left to place, sorted."""
    owned = _previous_owners(tasks, clients)
    kept: set[TaskId] = set()
    for name, previous in owned.items():
        for task in previous[: slots.base]:
            slots.take(name, task)
            kept.add(task)
    for name in sorted(owned, key=lambda n: (-len(owned[n]), n)):
        if len(owned[name]) > slots.base and slots.can_take(name):
            task = owned[name][slots.base]
            slots.take(name, task)
            kept.add(task)
    return [task for task in tasks if task not in kept]


def _place_by_state(
    free: Sequence[TaskId], clients: Mapping[str, ClientState], slots: _Slots
) -> list[TaskId]:
    """Step 3: free tasks to clients with room, pairs with the most local state first."""
    candidates = sorted(
        (-score, task, name)
        for task in free
        for name, client in clients.items()
        if (score := state_score(client, task)) != _NO_STATE
    )
    taken: set[TaskId] = set()
    for _, task, name in candidates:
        if task not in taken and slots.can_take(name):
            slots.take(name, task)
            taken.add(task)
    return [task for task in free if task not in taken]


def _place_rest(free: Sequence[TaskId], slots: _Slots) -> None:
    """Step 4: stateless leftovers to the least loaded client with room."""
    for task in free:
        name = min(
            (n for n in slots.placed if slots.can_take(n)),
            key=lambda n: (len(slots.placed[n]), n),
        )
        slots.take(name, task)
