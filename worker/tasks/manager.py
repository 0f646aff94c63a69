"""Applies assignments to tasks and runs the commit protocol across them.

Single-threaded: everything here runs on the processing thread, including the group
member's rebalance callbacks (kafka-python fires them inside ``poll``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from worker.assignment.model import Assignment
from worker.assignment.task_id import TP, TaskId
from worker.errors import (
    KafkaUnavailable,
    TaskCorrupted,
    TaskMigrated,
    TopologyError,
    WorkerError,
)
from worker.kafka.clients import DataConsumer, ProduceFailed
from worker.kafka.transactions import TransactionFailed
from worker.observability import get_logger
from worker.processing.handlers import (
    ExceptionPolicy,
    RecordFailed,
    describe,
    format_stacktrace,
)
from worker.processing.topology import BuiltTopology, Subtopology
from worker.state.checkpoint import CheckpointError, read_checkpoint
from worker.state.restore import ChangelogReader
from worker.tasks.commit import AtLeastOnceCommit, CommitFailed, CommitProtocol, OffsetCommitter
from worker.tasks.failures import FailureDecision, ProcessingFailures
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task, TaskContext

# What a sink's send raises when the producer, not the record, is at fault.
_PRODUCER_FAILURES = (KafkaUnavailable, ProduceFailed, TransactionFailed)


class TaskManager:
    """Owns every task of this worker: create, restore, process, commit, suspend, close."""

    def __init__(
        self,
        topology: BuiltTopology,
        ctx: TaskContext,
        reader: ChangelogReader,
        consumer: DataConsumer,
        committer: OffsetCommitter,
        high_watermarks: Callable[[Iterable[TP]], dict[TP, int]] | None = None,
        commit_protocol: CommitProtocol | None = None,
    ) -> None:
        self._subtopologies: dict[int, Subtopology] = {st.id: st for st in topology.subtopologies}
        self._ctx = ctx
        self._reader = reader
        self._consumer = consumer
        self._committer = committer
        self.tasks: dict[TaskId, Task] = {}
        self._route: dict[TP, Task] = {}
        self._high_watermarks = high_watermarks
        self._commit_protocol: CommitProtocol = commit_protocol or AtLeastOnceCommit(
            ctx.collector, committer, ctx.settings.commit_timeout_s
        )
        self._failures = ProcessingFailures(
            ExceptionPolicy(ctx.settings.processing_exception_handler),
            ctx.settings.processing_exception_max_retries,
        )
        self._first_assignment_at: float | None = None
        self._first_processed = False
        self._log = get_logger(component="task_manager")
        self.on_change: Callable[[], None] = lambda: None

    # -- assignment ------------------------------------------------------------------

    def on_assigned(self, assignment: Assignment) -> None:
        """Apply an assignment (cooperative): a task it leaves in its role is not touched.

        1. Hand over the actives this instance lost: one commit of every running active
           (under exactly-once they share the open transaction), then stop them. Done
           while the member still holds the new generation's assignment, before its
           follow-up join, so their new owners start from what was committed here.
        2. Close (clean, checkpoint written) the tasks no longer assigned in any role,
           initial standbys included: the cleaner removes their directories later.
        3. Recycle the tasks whose role changed, keeping their open stores: an active
           turned standby tails from its committed offsets; a standby, warmup or initial
           standby turned active restores only what it is behind.
        4. Open the new ones, check their stored offsets against the changelogs, start.
        """
        if self._first_assignment_at is None:
            self._first_assignment_at = self._ctx.clock.monotonic()
        roles = _roles(assignment)
        revoked = [
            t for t in self.tasks.values() if t.is_active and roles.get(t.id) is not TaskRole.ACTIVE
        ]
        if revoked:
            self._hand_over(revoked)
        for task_id in sorted(set(self.tasks) - set(roles)):
            self._close(self.tasks.pop(task_id), clean=True)
        created: list[Task] = []
        for task_id, role in sorted(roles.items()):
            task = self.tasks.get(task_id)
            if task is None:
                task = self._open(task_id, role)
                if task is not None:
                    created.append(task)
            elif task.role is TaskRole.INITIAL_STANDBY:
                self._recycle_initial_standby(task, role)
            elif task.role is not role or task.state is TaskState.SUSPENDED:
                self._change_role(task, role)
        self._check_offsets(created)
        for task in created:
            self._start(task)
        self._publish_kinds()
        self._log.info(
            "assignment.applied",
            generation=assignment.generation,
            active=sorted(map(str, assignment.active)),
            standby=sorted(map(str, assignment.standby)),
            warmup=sorted(map(str, assignment.warmup)),
            revoked=sorted(str(t.id) for t in revoked),
        )
        self.on_change()

    def _hand_over(self, revoked: list[Task]) -> None:
        """Step 1: commit, then stop the revoked actives (they stay open for step 3)."""
        try:
            self.commit()
        except TaskMigrated as exc:
            # The group went on without us meanwhile: no active of ours is ours any more.
            self._log.warning("revoke.migrated", error=str(exc))
            self.on_lost()
            return
        for task in revoked:
            self._stop_inputs(task)
            task.discard_uncommitted()  # empty after a commit; void after a failed one
            if task.state is not TaskState.SUSPENDED:
                task.transition(TaskState.SUSPENDED, "revoked")

    def _change_role(self, task: Task, role: TaskRole) -> None:
        """Step 3: stop what the task reads in its old role, recycle, start again."""
        if task.state is not TaskState.SUSPENDED:
            self._stop_inputs(task)
            task.transition(TaskState.SUSPENDED, f"becomes {role.value}")
        task.recycle(role)
        self._start(task)

    def on_lost(self) -> None:
        """The group went on without this instance: every active may run elsewhere now.

        Their uncommitted work is void (under exactly-once the open transaction is
        aborted first), so they close dirty; standbys stay, their copies are still good.
        The member joins again by itself and the next assignment starts over.
        """
        actives = sorted(t for t, task in self.tasks.items() if task.is_active)
        if not actives:
            return
        self._commit_protocol.abort()
        for task_id in actives:
            task = self.tasks.pop(task_id)
            task.discard_uncommitted()
            self._close(task, clean=False)
        self._publish_kinds()
        self._log.warning("tasks.lost", tasks=[str(t) for t in actives])
        self.on_change()

    def _publish_kinds(self) -> None:
        for role in TaskRole:
            count = sum(1 for t in self.tasks.values() if t.role is role)
            self._ctx.metrics.tasks.labels(kind=role.value).set(count)

    # -- initial standbys: state found on disk, opened before the group join ----------

    def open_initial_standbys(
        self, task_ids: Iterable[TaskId], partitions: Mapping[int, int]
    ) -> None:
        """Open every non-empty task directory of a stateful sub-topology as an initial standby.

        Runs before the group join, so corrupt state is found (and wiped) now, while
        another instance may still hold a good copy, and the first subscription reports
        what is really on disk. Directories of sub-topologies or partitions the topology
        no longer has are left alone for the cleaner.
        """
        opened: list[Task] = []
        for task_id in task_ids:
            subtopology = self._subtopologies.get(task_id.subtopology)
            if subtopology is None or not subtopology.stores:
                self._log.info("initial_standby.skipped", task_id=str(task_id), reason="stateless")
                continue
            if task_id.partition >= partitions.get(task_id.subtopology, 0):
                self._log.info(
                    "initial_standby.skipped", task_id=str(task_id), reason="no partition"
                )
                continue
            task = self._open(task_id, TaskRole.INITIAL_STANDBY)
            if task is not None:
                opened.append(task)
                self._ctx.metrics.initial_standbys_created.inc()
        self._check_offsets(opened)
        self._publish_kinds()
        self._log.info("initial_standbys.opened", tasks=sorted(str(t.id) for t in opened))

    def _recycle_initial_standby(self, task: Task, role: TaskRole) -> None:
        task.recycle(role)
        into = "active" if role is TaskRole.ACTIVE else "standby"
        self._ctx.metrics.initial_standbys_recycled.labels(into=into).inc()
        task.log.info("initial_standby.recycled", into=role.value)
        self._start(task)

    def _open(self, task_id: TaskId, role: TaskRole) -> Task | None:
        """Create and open a task; a store that cannot be read is wiped and reopened empty."""
        subtopology = self._subtopologies.get(task_id.subtopology)
        if subtopology is None:
            self._log.error("assignment.unknown_subtopology", task_id=str(task_id))
            return None
        task = Task(task_id, role, subtopology, self._ctx)
        try:
            task.open()
        except TaskCorrupted as exc:
            task.transition(TaskState.CORRUPTED, exc.reason)
            task.wipe("corrupt_store")
        self.tasks[task_id] = task
        return task

    def _check_offsets(self, tasks: list[Task]) -> None:
        """Wipe tasks whose stored offsets lie beyond their changelog's end.

        Such state belongs to another incarnation of the changelog (the topic was
        deleted and recreated, or the cluster replaced): restoring on top of it would
        mix two histories, and on some brokers the restore would never see an end.
        Ends come from the fetch path's high watermark, in one batch for all tasks.
        """
        wanted = {tp: (task, off) for task in tasks for tp, off in task.stored_offsets().items()}
        if not wanted or self._high_watermarks is None:
            return
        ends = self._high_watermarks(list(wanted))
        beyond: dict[TaskId, Task] = {}
        for tp, end in ends.items():
            task, offset = wanted[tp]
            if offset >= end:
                task.log.warning(
                    "state.offset_beyond_changelog_end",
                    changelog=f"{tp[0]}-{tp[1]}",
                    offset=offset,
                    end=end,
                )
                beyond[task.id] = task
        for task in beyond.values():
            task.transition(TaskState.CORRUPTED, "offset beyond changelog end")
            task.wipe("offset_beyond_changelog_end")

    def clean_state_dir(self) -> None:
        """Delete task directories nobody owns that are older than state.cleanup.delay.ms."""
        if self._first_assignment_at is None:
            return  # until the first assignment every directory may still be claimed
        removed = self._ctx.state_dir.clean_unowned(self._ctx.settings.state_cleanup_delay_ms)
        for task_id in removed:
            self._log.info("state.cleaned", task_id=str(task_id))

    def _start(self, task: Task) -> None:
        """Actives restore what they are behind, then process; standbys start tailing."""
        if not task.is_active:
            task.transition(TaskState.RUNNING, "tailing")
            self._reader.register(task, standby=True)
        else:
            task.transition(TaskState.RESTORING)
            self._reader.register(task)

    def _close(self, task: Task, clean: bool) -> None:
        if task.role is TaskRole.INITIAL_STANDBY:
            self._ctx.metrics.initial_standbys_closed.inc()
            task.log.info("initial_standby.closed", reason="not assigned")
        self._stop_inputs(task)
        try:
            task.close(clean)
        except Exception:
            self._log.exception("task.close_failed", task_id=str(task.id))

    def _stop_inputs(self, task: Task) -> None:
        self._reader.unregister(task)
        self._consumer.remove(task.source_partitions)
        for tp in task.source_partitions:
            self._route.pop(tp, None)

    def _start_inputs(self, task: Task) -> None:
        committed = self._committer.committed(task.source_partitions)
        self._consumer.add(task.start_positions(committed))
        for tp in task.source_partitions:
            self._route[tp] = task

    # -- restore and processing ------------------------------------------------------

    def restoring(self) -> bool:
        """True while some active task restores (processing of it has not started)."""
        return self._reader.restoring()

    def reading_changelogs(self) -> bool:
        """True while any task restores or tails changelogs (the loop must keep stepping)."""
        return self._reader.has_work()

    def warmups_caught_up(self, acceptable_lag: int) -> list[TaskId]:
        """Warmup tasks now within ``acceptable_lag`` records of their changelogs' end."""
        caught_up = []
        for task_id, task in self.tasks.items():
            if task.role is TaskRole.WARMUP and task.state is TaskState.RUNNING:
                lag = self._reader.lag(task_id)
                if lag is not None and lag <= acceptable_lag:
                    caught_up.append(task_id)
        return sorted(caught_up)

    def restore_step(self, timeout: float) -> None:
        finished = self._reader.step(timeout)
        for task in finished:
            task.revived = False
            task.transition(TaskState.RUNNING, "restored")
            self._start_inputs(task)
        if finished:
            self.on_change()

    def process(self, messages: list[Any]) -> int:
        """Route each record to its task. Returns how many were processed.

        A record whose processing raises revives its task (see ``_processing_failed``);
        the rest of the batch for a revived task is dropped with its partitions. Raises
        RecordFailed where a record's policy is ``fail``, and the worker's own errors.
        """
        route = self._route
        processed = 0
        for msg in messages:
            task = route.get((msg.topic(), msg.partition()))
            if task is not None:  # records of a just-revoked partition are dropped
                try:
                    task.process(msg)
                except _PRODUCER_FAILURES as exc:
                    self._producer_failed(exc)
                    continue
                except Exception as exc:
                    if isinstance(exc, WorkerError) and not isinstance(exc, TopologyError):
                        raise  # the worker's own failure (or a fail policy), not the record's
                    self._processing_failed(task, msg, exc)
                    continue
                processed += 1
        if processed:
            self._ctx.metrics.processed_records.inc(processed)
            if not self._first_processed and self._first_assignment_at is not None:
                self._first_processed = True
                elapsed = self._ctx.clock.monotonic() - self._first_assignment_at
                self._ctx.metrics.first_process_after_join.set(elapsed)
        return processed

    def _processing_failed(self, task: Task, msg: Any, exc: Exception) -> None:
        """A processor or sink raised on ``msg``: revive, then retry it, skip it or stop.

        1. Count the failure; ProcessingFailures says retry, skip or fail.
        2. fail: raise RecordFailed; the worker stops and its tasks close dirty.
        3. Drop the partial work of the failed attempt by reviving from the last committed
           state. Under exactly-once the open transaction is aborted, so every running
           active task is revived; under at-least-once only this one (what it already
           produced stays produced: at least once).
        4. skip: mark the record, so that when it arrives again it is skipped (logged or
           dead-lettered, inside the transaction that commits past it).
        """
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        decision, attempts = self._failures.failed(topic, partition, offset)
        task.log.warning(
            "record.processing_failed",
            record=f"{topic}-{partition}@{offset}",
            attempt=attempts,
            decision=decision.value,
            error=describe(exc),
        )
        if decision is FailureDecision.FAIL:
            raise RecordFailed(
                f"task {task.id}: record {topic}-{partition}@{offset} failed {attempts} times:"
                f" {describe(exc)} (processing.exception.handler = fail)"
            ) from exc
        if decision is FailureDecision.SKIP:
            task.mark_poisoned(msg, exc, format_stacktrace(exc))
        running = [t for t in self.tasks.values() if t.is_active and t.state is TaskState.RUNNING]
        revived = running if self._commit_protocol.abort() else [task]
        self._revive(revived, "processing_error", describe(exc))

    def _producer_failed(self, exc: WorkerError) -> None:
        """A sink could not send (broker away, no transaction could start, fenced).

        Not the record's fault: abort what can be aborted and revive every running active
        task from its last committed state, as a failed commit does; the records are
        processed again once the producer works.
        """
        reason = "transaction_failed" if isinstance(exc, TransactionFailed) else "produce_failed"
        self._log.warning("produce.failed", reason=reason, error=str(exc))
        self._commit_protocol.abort()
        running = [t for t in self.tasks.values() if t.is_active and t.state is TaskState.RUNNING]
        self._revive(running, reason, str(exc))

    def pending_bytes(self) -> int:
        return sum(t.pending_bytes for t in self.tasks.values())

    def all_running(self) -> bool:
        return all(t.state is TaskState.RUNNING for t in self.tasks.values())

    # -- commit ----------------------------------------------------------------------

    def commit(self) -> bool:
        """Commit every running active task with the guarantee's protocol (tasks/commit.py),
        then rewrite the ``.checkpoint`` files whose interval has passed.

        A commit that cannot complete drops the uncommitted work of every running task
        and revives them from their last committed state (a log line and
        ``worker_task_revivals_total``); the process keeps going. Returns False when there
        was nothing to commit or the commit failed.
        """
        self._checkpoint_standbys()
        running = [t for t in self.tasks.values() if t.is_active and t.state is TaskState.RUNNING]
        if not any(t.needs_commit() for t in running):
            return False
        metrics = self._ctx.metrics
        try:
            with metrics.commit_seconds.time():
                offsets = self._commit_protocol(running)
        except CommitFailed as exc:
            self._log.warning("commit.failed", reason=exc.reason, error=str(exc))
            self._revive(running, exc.reason, str(exc))
            return False
        for task in running:
            task.mark_sources_committed(offsets)
            task.maybe_write_checkpoint()
        self._failures.forget_committed(offsets)
        metrics.commits.inc()
        return True

    def discard_uncommitted(self) -> None:
        """Drop what every task processed since the last commit (aborted under exactly-once)."""
        self._commit_protocol.abort()
        for task in self.tasks.values():
            task.discard_uncommitted()

    def _revive(self, tasks: list[Task], reason: str, error: str) -> None:
        """Close dirty and revive: drop buffers and positions, restore, reprocess.

        The stores hold only committed data (the buffers never reached RocksDB), so
        reviving means restoring the changelog tail from the stored offsets (aborted
        records are skipped under read_committed) and consuming from the committed
        source offsets again. ``reason`` labels ``worker_task_revivals_total``.
        """
        self._log.warning(
            "tasks.revived", reason=reason, tasks=sorted(str(t.id) for t in tasks), error=error
        )
        for task in tasks:
            self._stop_inputs(task)
            task.discard_uncommitted()
            task.transition(TaskState.SUSPENDED, f"revived: {reason}")
            task.revived = True
            self._ctx.metrics.task_revivals.labels(reason=reason).inc()
            self._start(task)
        self.on_change()

    def _checkpoint_standbys(self) -> None:
        """Standby stores commit each batch they apply; only their .checkpoint lags behind."""
        for task in self.tasks.values():
            if not task.is_active and task.state is TaskState.RUNNING:
                task.maybe_write_checkpoint()

    def close_all(self, clean: bool) -> None:
        """Close every task (clean: after a final commit; checkpoints written)."""
        for task_id in sorted(self.tasks):
            self._close(self.tasks.pop(task_id), clean)
        self._publish_kinds()

    # -- what this instance reports when it joins ------------------------------------

    def offset_sums(self) -> dict[TaskId, int]:
        """Per task with local state, the sum of its changelog positions (stored offset + 1).

        Open tasks report from their stores, whatever their role (the leader knows the
        running actives from ``prev_active``); task directories nobody has open report
        from their ``.checkpoint``, which needs no store to be opened.
        """
        sums: dict[TaskId, int] = {}
        for task_id, task in self.tasks.items():
            if task.stores:
                sums[task_id] = sum(
                    off + 1
                    for store in task.stores.values()
                    for off in store.committed_offsets().values()
                )
        state_dir = self._ctx.state_dir
        for task_id in state_dir.list_non_empty_task_ids():
            if task_id not in sums:
                try:
                    offsets = read_checkpoint(state_dir.checkpoint_path(task_id))
                except CheckpointError:
                    continue
                if offsets:
                    sums[task_id] = sum(off + 1 for off in offsets.values())
        return sums

    def tasks_by_role(self, *roles: TaskRole) -> frozenset[TaskId]:
        return frozenset(tid for tid, t in self.tasks.items() if t.role in roles)


def _roles(assignment: Assignment) -> dict[TaskId, TaskRole]:
    """One role per task; should a task appear twice, active beats warmup beats standby."""
    roles = dict.fromkeys(assignment.standby, TaskRole.STANDBY)
    roles.update(dict.fromkeys(assignment.warmup, TaskRole.WARMUP))
    roles.update(dict.fromkeys(assignment.active, TaskRole.ACTIVE))
    return roles
