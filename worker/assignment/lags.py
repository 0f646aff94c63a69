"""How far behind each client's local state is, per task: the leader's input to the planner.

KIP-441 (reference/kafka-streams-state.md §4.4) measures a client's lag on a task as the
sum of its changelogs' end offsets minus the sum of the positions the client reports for
them (``Subscription.task_offset_sums``). Pure: the end offsets are fetched by the caller
(:mod:`worker.kafka.task_assignor`), which also logs when they could not be.

Three departures from Kafka Streams, all deliberate:

* The end-offset sum of a task is ``max(Σ listed end offsets, the highest sum any client
  reports)``. The test broker's ListOffsets under-reports multi-record batches
  (platform-facts.md); a client's reported position is a position it really read up to,
  so the log end is at least that. On real Kafka the listed sum already dominates. The
  same rule is the fallback when no end offset could be fetched at all: the client with
  the most state then counts as caught up and the others lag by the difference, instead
  of Kafka Streams' "keep the previous assignment" fallback.
* A running active (``prev_active``) has lag 0, whatever it reports (Kafka Streams'
  ``LATEST_OFFSET`` rule without the sentinel: members now report real sums for actives
  too, so the leader can rank standbys; the active itself is caught up by definition).

* A client that holds state for a task is measured against the sum the task's running
  owner (``prev_active``) reports, when it reports one, not against the end offsets.
  Every report is taken when its member joins, the end offsets only when the round is
  planned, after the join phase (seconds on the test broker): a changelog written at
  ``r`` records a second left a tailing warmup ``r`` x that wait behind the listed
  ends however current it was, so once that exceeded ``acceptable.recovery.lag`` the
  leader never saw the warmup caught up, while the warmup, judging by its own reader,
  asked for a probing round every few seconds forever. The owner's report comes from
  the same join phase. A client holding no state still lags by the whole changelog.

A negative reported sum (an old member's ``LATEST_OFFSET``/``UNKNOWN_OFFSET_SUM``
sentinel) counts as no report. A task without changelogs (stateless) has lag 0 on every
client: any client can run it at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from worker.assignment.task_id import TP, TaskId

K = TypeVar("K")


class OffsetReport(Protocol):
    """What lag computation needs from a member's subscription (``model.Subscription``)."""

    @property
    def task_offset_sums(self) -> Mapping[TaskId, int]: ...

    @property
    def prev_active(self) -> frozenset[TaskId]: ...


def changelog_partitions(
    tasks: Iterable[TaskId], changelog_topics: Mapping[int, Sequence[str]]
) -> dict[TaskId, tuple[TP, ...]]:
    """Each task's changelog partitions: partition ``p`` of each of its subtopology's topics.

    Tasks of a subtopology without stores get an empty tuple (stateless).
    """
    return {
        task: tuple(
            (topic, task.partition) for topic in sorted(changelog_topics.get(task.subtopology, ()))
        )
        for task in tasks
    }


def end_offset_sums(
    partitions_per_task: Mapping[TaskId, Sequence[TP]],
    end_offsets: Mapping[TP, int],
    clients: Mapping[K, OffsetReport],
) -> dict[TaskId, int]:
    """Per stateful task, the best lower bound of its changelogs' total end (see module doc)."""
    highest: dict[TaskId, int] = {}
    for client in clients.values():
        for task, reported in client.task_offset_sums.items():
            if reported > highest.get(task, 0):
                highest[task] = reported
    sums: dict[TaskId, int] = {}
    for task, partitions in partitions_per_task.items():
        if not partitions:
            continue
        listed = sum(max(0, end_offsets.get(tp, 0)) for tp in partitions)
        sums[task] = max(listed, highest.get(task, 0))
    return sums


def owner_sums(clients: Mapping[K, OffsetReport]) -> dict[TaskId, int]:
    """Per task, the sum its running owner (``prev_active``) reports, where it reports one;
    the highest when two claim it (the new owner of a move awaiting its release)."""
    sums: dict[TaskId, int] = {}
    for client in clients.values():
        for task, reported in client.task_offset_sums.items():
            if task in client.prev_active and reported > sums.get(task, -1):
                sums[task] = reported
    return sums


@dataclass(frozen=True, slots=True)
class TaskLags(Generic[K]):
    """How far behind each client is on each task, without a client x task table.

    ``reported[client]`` holds the tasks the client reports a position for or runs
    (``prev_active``); on any other task it is behind by ``unreported[task]``: the
    task's whole changelog (a full restore), 0 for a stateless task. A group of a
    thousand clients and ten thousand tasks thus costs the reports, not ten million
    entries; :func:`worker.assignment.planner.plan` takes both parts as they are.
    """

    reported: Mapping[K, Mapping[TaskId, int]]
    unreported: Mapping[TaskId, int]

    def of(self, client: K, task: TaskId) -> int:
        """The lag of ``client`` on ``task`` (a task not given to :func:`task_lags`: 0)."""
        return self.reported[client].get(task, self.unreported.get(task, 0))


def task_lags(
    tasks: Iterable[TaskId],
    changelog_partitions_per_task: Mapping[TaskId, Sequence[TP]],
    end_offsets: Mapping[TP, int],
    clients: Mapping[K, OffsetReport],
) -> TaskLags[K]:
    """Every client's lag on every task (>= 0), as :class:`TaskLags`.

    ``end_offsets`` may lack partitions (they could not be fetched): a missing partition
    counts as 0 there, so the members' reports decide (module doc). A task missing from
    ``changelog_partitions_per_task`` counts as stateless.
    """
    wanted = set(tasks)
    stateful = {t: changelog_partitions_per_task.get(t, ()) for t in wanted}
    ends = end_offset_sums(stateful, end_offsets, clients)
    # A client holding state is measured against its task's owner's report where there
    # is one (module doc); a client without state is behind by the whole changelog.
    against = ends | {t: end for t, end in owner_sums(clients).items() if t in ends}
    reported: dict[K, dict[TaskId, int]] = {}
    for key, client in clients.items():
        held = {t for t, s in client.task_offset_sums.items() if s >= 0} | client.prev_active
        reported[key] = {t: _lag(client, t, against.get(t)) for t in sorted(held & wanted)}
    return TaskLags(reported, {task: ends.get(task, 0) for task in sorted(wanted)})


def _reported(client: OffsetReport, task: TaskId) -> int:
    """The client's position sum for ``task``; -1 when it reports none (or a sentinel)."""
    value = client.task_offset_sums.get(task, -1)
    return value if value >= 0 else -1


def _lag(client: OffsetReport, task: TaskId, end_sum: int | None) -> int:
    if end_sum is None or task in client.prev_active:
        return 0
    reported = _reported(client, task)
    return end_sum if reported < 0 else max(0, end_sum - reported)
