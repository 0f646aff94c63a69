"""Hand-overs within one round: a stateful task changes owner in the round that moves it,
without a follow-up round (issue 23, item 2).

The round that moves a task gives it to its new owner as a standby and names the move in
``Assignment.pending_moves`` (step f of :mod:`worker.assignment.planner`). In order:

1. The old owner finds the task revoked. Its hand-over commit (every running active,
   :meth:`worker.tasks.manager.TaskManager.on_assigned`) writes, after the task's last
   changelog records, a release marker into each of the task's logged changelogs
   (:mod:`worker.state.release_marker`: the generation of the round and the source
   offsets committed with it); under exactly-once in the same transaction, so the marker
   is visible exactly when the records before it are. Then it stops the task.
2. The new owner holds the task as a standby, already tailing those changelogs
   (:class:`ReleaseWatch` expects the release). It reports the task as its own when it
   joins, so the leader leaves it there.
3. When its standby has read a marker of that very generation in every logged
   changelog of the task, it takes the task over at once: it turns the standby into the
   active and processes from the offsets the marker carries (its stores hold every
   record before the marker, and nobody writes the changelog in between). The marker
   also names the client the round gave the task to: a member whose standby or warmup
   reads that it is the one, in the generation it has just joined, takes over before its
   own assignment arrives (the leader's plan is the same for every member; some brokers
   answer the members' SyncGroups a second apart).

Only one owner ever processes the task: the old one stops before its marker becomes
readable, the new one starts only after reading it. A release that never comes (the old
owner died, or its last commit failed) falls back to the next rebalance: the task is then
active on its new owner outright (it claims it, nobody else does). The old owner asks for
that rebalance itself when its commit failed, and for every task it cannot release in its
changelog (stateless, or stores that are all tables): those keep KIP-429's follow-up round.

Warmup promotion, scale-out and graceful scale-in all move tasks this way. A worker that
stops on SIGTERM joins once more saying it is leaving (worker/kafka/member_joins.py), so the
round moves every active of its, releases them like any revoked task, and leaves once their
new owners have written (:class:`TakeOverWatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from worker.assignment.task_id import TP, TaskId
from worker.state.release_marker import ReleaseMarker
from worker.tasks.task import Task


def logged_changelogs(task: Task) -> tuple[TP, ...]:
    """The changelog partitions the task writes (a table's changelog is its source topic,
    written by others: it cannot carry a marker)."""
    return tuple(
        task.changelogs[spec.name] for spec in task.subtopology.stores if not spec.is_table
    )


def release_of(
    task: Task, generation: int, owner: str = ""
) -> tuple[tuple[TP, ...], ReleaseMarker]:
    """Where to write the task's release and what it says: the next offset of each source
    partition, as the hand-over commit commits it, and the client the round gave it to."""
    sources = set(task.source_partitions)
    offsets = {tp: off for tp, off in task.next_positions().items() if tp in sources}
    return logged_changelogs(task), ReleaseMarker(generation, offsets, owner)


@dataclass
class _Expected:
    generation: int
    changelogs: frozenset[TP]
    seen: dict[TP, ReleaseMarker] = field(default_factory=dict)


class ReleaseWatch:
    """The tasks this member holds as standbys until their previous owner releases them.

    Fed the markers the changelog reader read; answers which tasks were released, with
    the offsets to process from. It keeps the latest marker of every changelog partition
    it was shown: the old owner may release a task before this member has its
    assignment, while its warmup or standby reads on (one marker per partition at most).
    Single-threaded (the processing thread).
    """

    def __init__(self) -> None:
        self._expected: dict[TaskId, _Expected] = {}
        self._by_changelog: dict[TP, TaskId] = {}
        self._latest: dict[TP, ReleaseMarker] = {}
        self._fresh: set[TaskId] = set()  # expected since the last offer

    @property
    def awaiting(self) -> frozenset[TaskId]:
        return frozenset(self._expected)

    def expect(self, task: Task, generation: int) -> None:
        """Wait for ``task``'s release in ``generation`` (exactly: a marker of another round,
        or of an earlier life of the group, is not this hand-over's); a task already expected
        keeps the generation it was first expected in (a later round does not move it)."""
        if task.id in self._expected:
            return
        changelogs = frozenset(logged_changelogs(task))
        expected = _Expected(generation, changelogs)
        self._expected[task.id] = expected
        for tp in changelogs:
            self._by_changelog[tp] = task.id
            read = self._latest.get(tp)
            if read is not None and read.generation == generation:
                expected.seen[tp] = read
        self._fresh.add(task.id)

    def released_to(self, task: Task, generation: int, me: str) -> dict[TP, int] | None:
        """The offsets of ``task``'s release when the markers read in all its logged
        changelogs give it to ``me`` in ``generation``, else None: the round's plan, which
        this member's own assignment (still on its way) will show too (module doc)."""
        changelogs = logged_changelogs(task)
        markers = [self._latest.get(tp) for tp in changelogs]
        if not changelogs or any(
            m is None or m.generation != generation or m.owner != me for m in markers
        ):
            return None
        return _offsets(m for m in markers if m is not None)

    def forget(self, task_id: TaskId) -> None:
        expected = self._expected.pop(task_id, None)
        if expected is not None:
            for tp in expected.changelogs:
                self._by_changelog.pop(tp, None)

    def clear(self) -> None:
        self._expected.clear()
        self._by_changelog.clear()
        self._fresh.clear()

    def offer(self, markers: Iterable[tuple[TP, ReleaseMarker]]) -> dict[TaskId, dict[TP, int]]:
        """Take the markers read; return the tasks now released in every logged changelog
        (no longer expected) with the source offsets to process from."""
        touched, self._fresh = self._fresh, set()
        for tp, marker in markers:
            kept = self._latest.get(tp)
            if kept is None or marker.generation >= kept.generation:
                self._latest[tp] = marker
            task_id = self._by_changelog.get(tp)
            if task_id is None:
                continue
            expected = self._expected[task_id]
            if marker.generation == expected.generation:
                expected.seen[tp] = marker
                touched.add(task_id)
        released: dict[TaskId, dict[TP, int]] = {}
        for task_id in sorted(touched & set(self._expected)):
            expected = self._expected[task_id]
            if set(expected.seen) == expected.changelogs:
                released[task_id] = _offsets(expected.seen.values())
                self.forget(task_id)
        return released


def _offsets(markers: Iterable[ReleaseMarker]) -> dict[TP, int]:
    """The offsets the markers carry (one hand-over's markers all carry the same)."""
    offsets: dict[TP, int] = {}
    for marker in markers:
        for tp, off in marker.offsets.items():
            offsets[tp] = max(off, offsets.get(tp, off))
    return offsets


class TakeOverWatch:
    """Whether the new owners of the tasks this instance released have taken them over:
    every changelog its releases went to has grown by two records since (a new owner's
    first commit; one more than the old owner's own transaction marker, which may land
    after the baseline is read). Answers from ``ends`` (high watermarks; each read is a
    fetch round trip).

    A leaving worker waits for it before its LeaveGroup (worker/runtime/worker.py): on a
    broker that answers each member's JoinGroup on its own schedule (the test broker,
    docs/platform-notes.md) the others may not have joined the round yet when the
    leaving member has its assignment, and a LeaveGroup then would start the next round
    before they learnt of this one, so they would take the tasks over only in that round.
    On Kafka every member learns the round at once and the wait ends at their first commit.
    """

    def __init__(self, ends: Callable[[Iterable[TP]], Mapping[TP, int]], changelogs: Sequence[TP]):
        self._ends = ends
        self._baseline = dict(ends(changelogs))

    def taken_over(self) -> bool:
        if not self._baseline:
            return True
        now = self._ends(list(self._baseline))
        return all(now.get(tp, end) >= end + 2 for tp, end in self._baseline.items())


def awaiting_of(
    assignment_moves: Mapping[TaskId, str], standby: Iterable[TaskId], me: str
) -> set[TaskId]:
    """The standbys an assignment moves to this client (``me``: its client key)."""
    return {t for t in standby if assignment_moves.get(t) == me}
