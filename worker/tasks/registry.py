"""Every task of this worker and what each one reads.

:class:`Tasks` is the state the task manager, the record router and the committer
share: the tasks by id, the route from a source partition to its task, the data
consumer's assignment and the changelog reader's registrations. It keeps those three in
step (a task's inputs start and stop together) and owns the moves every part needs:
start, stop, close and revive. Single-threaded: the processing thread only.

A task reading one partition is routed by ``route``; one reading several by ``ordered``,
its records going through its :class:`~worker.tasks.partition_group.PartitionGroup`
(``groups``), which exists while the task reads and is dropped with its buffered
records when it stops.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.assignment.task_id import TP, TaskId
from worker.kafka.consumers import DataConsumer
from worker.observability import get_logger
from worker.state.release_marker import ReleaseMarker
from worker.state.restore import ChangelogReader
from worker.tasks.commit_protocols import GroupOffsets
from worker.tasks.partition_group import PartitionGroup, ranked_partitions, timestamp_reader
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext


class Tasks:
    """The tasks by id (``by_id``) and the route of each source partition (``route``)."""

    def __init__(
        self,
        ctx: TaskContext,
        reader: ChangelogReader[Task],
        consumer: DataConsumer,
        group_offsets: GroupOffsets,
    ) -> None:
        self.ctx = ctx
        self._reader = reader
        self._consumer = consumer
        self._current: list[Task] = []  # revived with current stores: start next step
        self._group_offsets = group_offsets
        self.by_id: dict[TaskId, Task] = {}
        self.route: dict[TP, Task] = {}  # tasks reading one partition
        self.ordered: dict[TP, Task] = {}  # tasks reading several, through their group
        self.groups: dict[TaskId, PartitionGroup] = {}
        self.first_assignment_at: float | None = None
        # Source offsets a released task resumes from (its old owner's release marker),
        # taken when its processing starts.
        self.released: dict[TaskId, dict[TP, int]] = {}
        self._log = get_logger(component="tasks")
        # Called after every change others publish (the worker's status snapshot).
        self.on_change: Callable[[], None] = lambda: None

    # -- queries ---------------------------------------------------------------------

    def running_actives(self) -> list[Task]:
        return [t for t in self.by_id.values() if t.is_active and t.state is TaskState.RUNNING]

    def ids_by_role(self, *roles: TaskRole) -> frozenset[TaskId]:
        return frozenset(tid for tid, t in self.by_id.items() if t.role in roles)

    def pending_bytes(self) -> int:
        return sum(t.pending_bytes for t in self.by_id.values())

    def all_running(self) -> bool:
        return all(t.state is TaskState.RUNNING for t in self.by_id.values())

    def publish_kinds(self) -> None:
        for role in TaskRole:
            count = sum(1 for t in self.by_id.values() if t.role is role)
            self.ctx.metrics.tasks.labels(kind=role.value).set(count)

    # -- restore ---------------------------------------------------------------------

    def restoring(self) -> bool:
        """True while some active task restores (processing of it has not started)."""
        return bool(self._current) or self._reader.restoring()

    def reading_changelogs(self) -> bool:
        """True while any task restores or tails changelogs (the loop must keep stepping)."""
        return bool(self._current) or self._reader.has_work()

    def restore_step(self, timeout: float) -> None:
        """One bounded batch of restoring; actives that reached the end start processing,
        and so do the ones revived with current stores (:meth:`revive`)."""
        finished, self._current = self._current, []
        if self._reader.has_work():
            finished += self._reader.step(0.0 if finished else timeout)
        for task in finished:
            task.revived = False
            task.transition(TaskState.RUNNING, "restored")
            self._start_processing(task)
        if finished:
            self.on_change()

    def take_corrupted(self) -> list[tuple[Task, str]]:
        """The tasks whose restore or standby update met corruption since the last call."""
        return self._reader.take_corrupted()

    def take_markers(self) -> list[tuple[TP, ReleaseMarker]]:
        """The release markers the changelog reader read since the last call."""
        return self._reader.take_markers()

    def warmups_caught_up(self, acceptable_lag: int) -> list[TaskId]:
        """Warmup tasks now within ``acceptable_lag`` records of their changelogs' end."""
        caught_up = []
        for task_id, task in self.by_id.items():
            if task.role is TaskRole.WARMUP and task.state is TaskState.RUNNING:
                lag = self._reader.lag(task_id)
                if lag is not None and lag <= acceptable_lag:
                    caught_up.append(task_id)
        return sorted(caught_up)

    # -- moves -----------------------------------------------------------------------

    def start(self, task: Task) -> None:
        """Actives restore what they are behind, then process; standbys start tailing."""
        if not task.is_active:
            task.transition(TaskState.RUNNING, "tailing")
            self._reader.register(task, standby=True)
        else:
            task.transition(TaskState.RESTORING)
            self._reader.register(task)

    def start_released(self, task: Task) -> None:
        """Start a standby just turned active on its old owner's release: its stores hold
        everything up to the release marker and nobody wrote the changelog since, so it
        processes at once, with no restore (worker/tasks/handover.py, step 3)."""
        task.transition(TaskState.RESTORING, "released")
        task.transition(TaskState.RUNNING, "released")
        self._start_processing(task)

    def stop_inputs(self, task: Task) -> None:
        """Stop reading for ``task``: its changelogs, its source partitions, its route."""
        self._current = [t for t in self._current if t is not task]
        self._reader.unregister(task)
        self._consumer.remove(task.source_partitions)
        for tp in task.source_partitions:
            self.route.pop(tp, None)
            self.ordered.pop(tp, None)
        group = self.groups.pop(task.id, None)
        if group is not None:
            group.clear()
            self.ctx.metrics.buffered_records.labels(task=str(task.id)).set(0)

    # -- inputs of tasks reading several partitions ----------------------------------

    def take_input_ends(self) -> dict[TP, int]:
        """The partitions whose fetch reached their end since the last call, and where."""
        return self._consumer.take_ends()

    def pause_inputs(self, partitions: list[TP]) -> None:
        self._consumer.pause(partitions)

    def resume_inputs(self, partitions: list[TP]) -> None:
        self._consumer.resume(partitions)

    def _start_processing(self, task: Task) -> None:
        """Read the task's inputs from the committed offsets, then run its processors'
        ``init`` and punctuators from the stream time it resumes with (restored or
        released alike: a released task without them would never punctuate)."""
        released = self.released.pop(task.id, {})
        if released:
            # Taken over on its release: no OffsetFetch. The release holds every source
            # offset of the group's (the old owner's last commit, made with it; a partition
            # it leaves out has none) and the stores hold the stream time. The coordinator
            # answers one request per connection at a time, so while this member joins a
            # round the fetch would wait for the JoinGroup and hold up every task here.
            found: dict[TP, tuple[int | None, str]] = {}
        else:
            found = self._group_offsets.committed_with_metadata(task.source_partitions)
        task.resume_stream_time({tp: metadata for tp, (_, metadata) in found.items()})
        committed = {tp: off for tp, (off, _) in found.items()}
        # A released task resumes where its old owner's release says, should the group's
        # committed offsets not show that commit yet.
        for tp, offset in released.items():
            known = committed.get(tp)
            if known is None or offset > known:
                committed[tp] = offset
        self._consumer.add(task.start_positions(committed))
        if len(task.source_partitions) > 1:
            self.groups[task.id] = self._group(task)
            self.ordered.update(dict.fromkeys(task.source_partitions, task))
        else:
            self.route.update(dict.fromkeys(task.source_partitions, task))
        if task.punctuators is not None:
            task.punctuators.start(task.stream_time)

    def _group(self, task: Task) -> PartitionGroup:
        settings = self.ctx.settings
        return PartitionGroup(
            ranked_partitions(task.subtopology, task.id.partition),
            settings.max_task_idle_ms,
            self.ctx.clock,
            timestamp_reader(settings.timestamp_extractor, lambda: task.stream_time),
            settings.buffered_records_per_partition,
        )

    def close(self, task_id: TaskId, clean: bool) -> None:
        """Stop and close one task (clean: checkpoint written); a failing close is logged."""
        task = self.by_id.pop(task_id)
        if task.role is TaskRole.INITIAL_STANDBY:
            self.ctx.metrics.initial_standbys_closed.inc()
            task.log.info("initial_standby.closed", reason="not assigned")
        self.stop_inputs(task)
        try:
            task.close(clean)
        except Exception:
            self._log.exception("task.close_failed", task_id=str(task_id))

    def close_all(self, clean: bool) -> None:
        """Close every task (clean: after a final commit; checkpoints written)."""
        for task_id in sorted(self.by_id):
            self.close(task_id, clean)
        self.publish_kinds()

    def revive(
        self,
        tasks: list[Task],
        reason: str,
        error: str,
        sends_kept: bool = False,
        stores_current: bool = False,
    ) -> None:
        """Close dirty and revive: drop buffers and positions, restore, reprocess.

        The stores hold only committed data (the buffers never reached RocksDB), so
        reviving means restoring the changelog tail from the stored offsets (aborted
        records are skipped under read_committed) and consuming from the committed
        source offsets again. ``reason`` labels ``worker_task_revivals_total``.
        ``sends_kept``: nothing sent since the last commit was aborted or lost
        (at-least-once, the task's own record failed): replayed records are not
        dead-lettered again (:meth:`Task.discard_uncommitted`), and the task runs again at
        once, without a restore. At-least-once writes changelogs only in commits, and the
        last one completed (a failed commit revives without ``sends_kept``), so the stores
        hold all their changelogs do; a restore would only wait for the changelogs' ends
        (a fetch wait each, ~0.5 s), for every bad record of a burst (issue 32).
        ``stores_current``: the same without ``sends_kept``'s meaning, for an exactly-once
        commit refused before it could commit (``generation_moved``): its transaction
        was aborted, so the changelogs hold nothing the stores lack (docs/platform-notes.md,
        "A staying task's pause on Kafka").
        """
        self._log.warning(
            "tasks.revived", reason=reason, tasks=sorted(str(t.id) for t in tasks), error=error
        )
        for task in tasks:
            self.stop_inputs(task)
            task.discard_uncommitted(sends_kept)
            task.transition(TaskState.SUSPENDED, f"revived: {reason}")
            task.revived = True
            self.ctx.metrics.task_revivals.labels(reason=reason).inc()
            if sends_kept or stores_current:  # runs again at the next restore step
                task.transition(TaskState.RESTORING, "revived: stores current")
                self._current.append(task)
            else:
                self.start(task)
        self.on_change()
