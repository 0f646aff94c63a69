"""The task layer's four parts, built together because they share one registry.

:class:`Tasks` (the registry) is what the others act on: :class:`TaskManager` applies
assignments, :class:`RecordRouter` processes records, :class:`TaskCommitter` commits,
:class:`TaskHealer` heals tasks found corrupted.
The worker's composition root calls :func:`build_task_parts` once; tests build the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from worker.assignment.task_id import TP
from worker.kafka.consumers import DataConsumer
from worker.processing.built_topology import BuiltTopology
from worker.state.restore import ChangelogReader
from worker.tasks.commit_protocols import CommitProtocol, GroupMemberView
from worker.tasks.committer import TaskCommitter
from worker.tasks.healing import TaskHealer
from worker.tasks.manager import TaskManager
from worker.tasks.registry import Tasks
from worker.tasks.router import RecordRouter
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext


@dataclass(frozen=True)
class TaskParts:
    tasks: Tasks
    manager: TaskManager
    router: RecordRouter
    committer: TaskCommitter
    healer: TaskHealer


def build_task_parts(
    topology: BuiltTopology,
    ctx: TaskContext,
    reader: ChangelogReader[Task],
    consumer: DataConsumer,
    member: GroupMemberView,
    protocol: CommitProtocol,
    high_watermarks: Callable[[Iterable[TP]], dict[TP, int]] | None = None,
    request_rebalance: Callable[[str], None] | None = None,
) -> TaskParts:
    """Wire the parts over one registry; ``protocol`` is the guarantee's commit
    (:func:`worker.runtime.guarantee.choose_guarantee`); ``request_rebalance`` is how
    the healer asks the group to reconsider a healed active."""
    tasks = Tasks(ctx, reader, consumer, member)
    committer = TaskCommitter(tasks, protocol)
    healer = TaskHealer(tasks, committer, request_rebalance)
    return TaskParts(
        tasks,
        TaskManager(topology, tasks, committer, high_watermarks),
        RecordRouter(tasks, committer, healer),
        committer,
        healer,
    )
