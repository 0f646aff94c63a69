"""Where each client stands on each task: its lag, and whether it is caught up.

Step a of :mod:`worker.assignment.planner`. A client is caught up on a task when its lag
is at most ``acceptable_recovery_lag``; a previous active always is (lag 0), and every
client is on a stateless task. Ranks compare lags beyond that bound only: every
caught-up client ranks 0, so among them balance decides (KIP-441).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from worker.assignment.task_id import TaskId

# The lag of a client that reports nothing and has no lag entry: behind everyone.
UNKNOWN_LAG = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ClientState:
    """What the leader knows about one client (one worker process) at this rebalance.

    ``lags`` maps a task to how many changelog records the client is behind on it
    (:func:`worker.assignment.lags.task_lags`: only the tasks it reports); in a plan a
    task missing from it counts as the plan's unreported lag of the task, and
    :meth:`lag` (which knows no plan) says ``UNKNOWN_LAG``. A task in ``prev_active``
    always counts as lag 0.
    """

    process_id: str
    prev_active: frozenset[TaskId] = frozenset()
    prev_standby: frozenset[TaskId] = frozenset()
    lags: Mapping[TaskId, int] = field(default_factory=dict)

    def lag(self, task: TaskId) -> int:
        if task in self.prev_active:
            return 0
        return self.lags.get(task, UNKNOWN_LAG)


class Standing:
    """Step a of the planner: the clients, their lags and who is caught up. Read-only.

    Lags are kept per task for the clients that report one (or claim the task); every
    other client is behind by the task's unreported lag. Queries answer from those few
    reports plus that one default, never by walking every client.
    """

    def __init__(
        self,
        clients: Mapping[str, ClientState],
        acceptable_recovery_lag: int,
        stateless: Iterable[TaskId],
        unreported: Mapping[TaskId, int],
    ) -> None:
        self.names = sorted(clients)
        self.clients = clients
        self.stateless = frozenset(stateless)
        self.acceptable = acceptable_recovery_lag
        self._unreported = unreported
        # task -> client -> lag, clients in key order; a claim (prev_active) means lag 0.
        self._known: dict[TaskId, dict[str, int]] = {}
        self._claims: dict[TaskId, list[str]] = {}
        for name in self.names:
            client = clients[name]
            for task, lag in client.lags.items():
                self._known.setdefault(task, {})[name] = lag
            for task in client.prev_active:
                self._known.setdefault(task, {})[name] = 0
                self._claims.setdefault(task, []).append(name)

    def lag(self, name: str, task: TaskId) -> int:
        if task in self.stateless:
            return 0
        known = self._known.get(task)
        return known[name] if known and name in known else self._unreported_lag(task)

    def _unreported_lag(self, task: TaskId) -> int:
        return self._unreported.get(task, UNKNOWN_LAG)

    def _rank(self, lag: int) -> int:
        return 0 if lag <= self.acceptable else lag

    def caught_up(self, name: str, task: TaskId) -> bool:
        return self.lag(name, task) <= self.acceptable

    def rank(self, name: str, task: TaskId) -> int:
        """How far behind for ordering: 0 when caught up (all equal), else the lag."""
        return self._rank(self.lag(name, task))

    def known_ranks(self, task: TaskId) -> dict[str, int]:
        """The ranks of the clients that report ``task``, in key order; every other
        client ranks :meth:`default_rank`."""
        if task in self.stateless:
            return {}
        return {name: self._rank(lag) for name, lag in self._known.get(task, {}).items()}

    def default_rank(self, task: TaskId) -> int:
        return 0 if task in self.stateless else self._rank(self._unreported_lag(task))

    def claimers(self, task: TaskId) -> list[str]:
        """The clients that run ``task`` as active now (more than one only after a restart)."""
        return self._claims.get(task, [])

    def caught_up_clients(self, task: TaskId) -> list[str]:
        """In key order. Walks every client only when one without a report is caught up."""
        if self.default_rank(task) == 0:
            return [name for name in self.names if self.caught_up(name, task)]
        return [n for n, lag in self._known.get(task, {}).items() if lag <= self.acceptable]
