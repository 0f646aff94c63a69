"""The planner's bookkeeping of loads: who is least loaded, and who still has room.

At a thousand clients the planner cannot afford to scan every client for every task
(ten thousand tasks make ten million comparisons). Both structures here answer "the
least loaded client, ties by key" from a heap instead, in time that grows with the
log of the group. Loads only ever grow during a plan, which is what makes a lazy heap
exact: an entry whose load is no longer the client's is dropped when it surfaces.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Sequence

from worker.assignment.task_id import TaskId


class LoadOrder:
    """Clients ordered by (load, key), smallest first; loads only grow (:meth:`bump`).

    Not thread-safe; lives for one plan.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self._load = dict.fromkeys(names, 0)
        self._heap = [(0, name) for name in sorted(self._load)]  # sorted: already a heap

    def load(self, name: str) -> int:
        return self._load[name]

    def bump(self, name: str) -> None:
        self._load[name] += 1
        heapq.heappush(self._heap, (self._load[name], name))

    def smallest(
        self,
        count: int,
        skip: Collection[str] = (),
        retired: Callable[[str], bool] | None = None,
    ) -> list[str]:
        """Up to ``count`` clients not in ``skip``, least loaded first (ties by key).

        ``retired`` marks clients that can never be chosen again (a full client stays
        full): they leave the heap for good. Skipped clients stay in it.
        """
        found: list[str] = []
        held: list[tuple[int, str]] = []
        heap = self._heap
        while heap and len(found) < count:
            load, name = heap[0]
            if load != self._load[name] or (retired is not None and retired(name)):
                heapq.heappop(heap)  # stale (the client has a newer entry) or retired
                continue
            held.append(heapq.heappop(heap))
            if name not in skip:
                found.append(name)
        for entry in held:
            heapq.heappush(heap, entry)
        return found


class Slots:
    """Step b's balance caps: ``T // N`` per client, and ``T % N`` of them one more.

    Whoever fills the slots, the caps add up to exactly ``T``, so placing every task
    within them always succeeds and always ends balanced. A client without room never
    gets room back (counts only grow, extra slots only run out).
    """

    def __init__(self, names: Sequence[str], task_count: int) -> None:
        self.base, self.extra_left = divmod(task_count, len(names))
        self.placed: dict[str, set[TaskId]] = {name: set() for name in names}
        self._order = LoadOrder(names)

    def can_take(self, name: str) -> bool:
        count = len(self.placed[name])
        return count < self.base or (count == self.base and self.extra_left > 0)

    def take(self, name: str, task: TaskId) -> None:
        if len(self.placed[name]) == self.base:
            self.extra_left -= 1
        self.placed[name].add(task)
        self._order.bump(name)

    def least_loaded(self, names: Iterable[str]) -> str | None:
        """The least loaded of ``names`` with room (ties by key), if any."""
        roomy = [n for n in names if self.can_take(n)]
        return min(roomy, key=lambda n: (len(self.placed[n]), n)) if roomy else None

    def least_loaded_except(self, excluded: Collection[str]) -> str | None:
        """The least loaded client with room outside ``excluded`` (ties by key), if any."""
        found = self._order.smallest(1, excluded, retired=lambda n: not self.can_take(n))
        return found[0] if found else None
