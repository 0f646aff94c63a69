"""Routes fetched records to their tasks, runs their punctuators, and says whose fault a
failed record (or punctuation) is.

A record whose processing raises (a task's :class:`RunFailed` names it) is the record's
fault, handed to its task's :class:`ProcessingFailures`, unless the worker says otherwise:
an :class:`OutputFailed` (the producer could not send) revives every running task
without blaming the record; any other worker error (a fail policy, a topology bug, a
fatal client error) stops the worker. A store that met corruption is neither: its task
is healed (:mod:`worker.tasks.healing`) and the others go on.

A task that reads one partition processes its records as they come. A task that reads
several has its records buffered in its partition group and processed in timestamp
order once the batch is routed (:mod:`worker.tasks.partition_group`), every loop step,
also one that fetched nothing (an idle wait may have ended).
"""

from __future__ import annotations

from typing import Any

from worker.errors import OutputFailed, StoreCorrupted, TransactionAborted, WorkerError
from worker.observability import get_logger
from worker.processing.handlers import describe
from worker.processing.punctuators import PunctuationFailed
from worker.tasks.committer import TaskCommitter
from worker.tasks.failures import RunFailed
from worker.tasks.healing import TaskHealer
from worker.tasks.partition_group import PartitionGroup
from worker.tasks.registry import Tasks
from worker.tasks.state import TaskState
from worker.tasks.task import Task


class RecordRouter:
    """Hands each record to the task that owns its partition; single-threaded."""

    def __init__(self, tasks: Tasks, committer: TaskCommitter, healer: TaskHealer) -> None:
        self._tasks = tasks
        self._committer = committer
        self._healer = healer
        self._first_processed = False
        self._log = get_logger(component="router")

    def process(self, messages: list[Any]) -> int:
        """Route each run of records from one partition to its task, then process what
        the tasks reading several partitions can (:meth:`_process_ordered`). Returns how
        many were processed.

        A record whose processing raises revives its task (see ``_processing_failed``);
        the rest of the batch for a revived task is dropped with its partitions (a revived
        task's partitions leave the route until it runs again). Raises RecordFailed where
        a record's policy is ``fail``, and the worker's own errors.
        """
        route = self._tasks.route
        processed = 0
        i, end = 0, len(messages)
        while i < end:
            msg = messages[i]
            task = route.get((msg.topic(), msg.partition()))
            if task is None:  # a task reading several partitions, or a just-revoked one
                i = self._buffer(messages, i)
                continue
            try:
                after = task.process_run(messages, i)
            except RunFailed as failed:
                stopped = failed
            else:
                processed += after - i
                i = after
                continue
            # Out of the handler, so that an error re-raised keeps its own context.
            processed += stopped.index - i
            i = stopped.index + 1
            self._run_failed(task, stopped)
        if self._tasks.groups:
            processed += self._process_ordered()
        if processed:
            self._counted(processed)
        return processed

    def _buffer(self, messages: list[Any], i: int) -> int:
        """Buffer the run of records at ``i`` in its task's group, or drop it (its
        partition was just revoked). Returns the index after the run."""
        msg = messages[i]
        topic, partition = msg.topic(), msg.partition()
        end = i + 1
        n = len(messages)
        while end < n and messages[end].partition() == partition and messages[end].topic() == topic:
            end += 1
        task = self._tasks.ordered.get((topic, partition))
        if task is not None:
            self._tasks.groups[task.id].add(messages, i, end)
        return end

    def _process_ordered(self) -> int:
        """Process what each task reading several partitions can, in timestamp order
        (:meth:`PartitionGroup.next_run`); pause the partitions it holds too much of."""
        tasks = self._tasks
        for tp, offset in tasks.take_input_ends().items():
            task = tasks.ordered.get(tp)
            if task is not None:
                tasks.groups[task.id].reached_end(tp, offset)
        processed = 0
        for task_id, group in list(tasks.groups.items()):
            if tasks.groups.get(task_id) is not group:
                continue  # revived by another task's failure
            task = tasks.by_id[task_id]
            processed += self._drain(task, group)
            if tasks.groups.get(task_id) is group:
                pause, resume = group.flow()
                if pause:
                    tasks.pause_inputs(pause)
                if resume:
                    tasks.resume_inputs(resume)
                tasks.ctx.metrics.buffered_records.labels(task=str(task_id)).set(group.buffered)
        return processed

    def _drain(self, task: Task, group: PartitionGroup) -> int:
        """Process ``group``'s runs until it waits, empties or its task stops reading
        (a record failed: ``_run_failed``)."""
        processed = 0
        enforced = self._tasks.ctx.metrics.enforced_processing.labels(task=str(task.id))
        groups = self._tasks.groups
        while groups.get(task.id) is group and (run := group.next_run()) is not None:
            try:
                after = task.process_run(run.records, run.start, run.stop)
            except RunFailed as failed:
                stopped = failed
            else:
                processed += after - run.start
                if run.enforced:
                    enforced.inc(after - run.start)
                group.consumed(run, after)
                continue
            processed += stopped.index - run.start
            group.consumed(run, stopped.index + 1)
            self._run_failed(task, stopped)  # out of the handler, as in process()
        return processed

    def punctuate(self) -> int:
        """Run the due punctuators of every running active task (once per loop batch,
        after processing, before the commit check). Returns the number of runs.

        A punctuator that raises is handled as a record whose processing raised (see
        ``_run_failed``): a :class:`RunFailed` names its
        :class:`~worker.processing.punctuators.Punctuation`. A task revived by another's
        failure (exactly-once) is passed over until it runs again.
        """
        fired = 0
        for task in self._tasks.running_actives():
            if task.state is not TaskState.RUNNING or task.punctuators is None:
                continue
            try:
                fired += task.punctuators.punctuate(task.stream_time)
            except PunctuationFailed as exc:
                failed = RunFailed(-1, exc.punctuation, exc.error)
            else:
                continue
            self._run_failed(task, failed)  # out of the handler, as in process()
        return fired

    def _counted(self, processed: int) -> None:
        metrics = self._tasks.ctx.metrics
        metrics.processed_records.inc(processed)
        started = self._tasks.first_assignment_at
        if not self._first_processed and started is not None:
            self._first_processed = True
            elapsed = self._tasks.ctx.clock.monotonic() - started
            metrics.first_process_after_join.set(elapsed)

    def _run_failed(self, task: Task, failed: RunFailed) -> None:
        """Whose fault: a store's (heal its task), the producer's (revive every task), the
        worker's (raise) or the record's (its task's failure policy)."""
        error = failed.error
        if isinstance(error, StoreCorrupted):
            self._healer.heal({task.id: error.reason})
        elif isinstance(error, OutputFailed):
            self._output_failed(error)
        elif isinstance(error, WorkerError):
            raise error  # the worker's own failure (or a fail policy), not the record's
        else:
            self._processing_failed(task, failed)

    def _processing_failed(self, task: Task, failed: RunFailed) -> None:
        """A processor or sink raised on a record: count it, then retry, skip or stop.

        1. The task's ProcessingFailures counts the attempt and applies the policy once
           the retries are used up: under ``fail`` it raises RecordFailed (the worker
           stops and its tasks close dirty); otherwise it marks the record to skip.
        2. Drop the partial work of the failed attempt by reviving from the last committed
           state. Under exactly-once the open transaction is aborted, so every running
           active task is revived; under at-least-once only this one (what it already
           produced stays produced: at least once). A record marked to skip is skipped
           (logged or dead-lettered) when it arrives again, inside the transaction that
           commits past it.
        """
        task.failures.failed(failed.record, failed.error)  # type: ignore[union-attr]
        running = self._tasks.running_actives()
        aborted = self._committer.abort()
        revived = running if aborted else [task]
        self._tasks.revive(revived, "processing_error", describe(failed.error), not aborted)

    def _output_failed(self, exc: OutputFailed) -> None:
        """A sink could not send (broker away, no transaction could start, fenced).

        Not the record's fault: abort what can be aborted and revive every running active
        task from its last committed state, as a failed commit does; the records are
        processed again once the producer works.
        """
        reason = "transaction_failed" if isinstance(exc, TransactionAborted) else "produce_failed"
        self._log.warning("produce.failed", reason=reason, error=str(exc))
        self._committer.abort()
        self._tasks.revive(self._tasks.running_actives(), reason, str(exc))
