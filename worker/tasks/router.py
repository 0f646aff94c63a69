"""Routes fetched records to their tasks and applies the processing failure policy.

A record whose processing raises is the record's fault unless the worker says otherwise:
an :class:`OutputFailed` (the producer could not send) revives every running task
without blaming the record; any other worker error (a fail policy, a topology bug, a
fatal client error) stops the worker.
"""

from __future__ import annotations

from typing import Any

from worker.errors import OutputFailed, TransactionAborted, WorkerError
from worker.observability import get_logger
from worker.processing.handlers import RecordFailed, describe, format_stacktrace
from worker.tasks.committer import TaskCommitter
from worker.tasks.failures import FailureDecision, ProcessingFailures
from worker.tasks.registry import Tasks
from worker.tasks.task import Task


class RecordRouter:
    """Hands each record to the task that owns its partition; single-threaded."""

    def __init__(
        self, tasks: Tasks, committer: TaskCommitter, failures: ProcessingFailures
    ) -> None:
        self._tasks = tasks
        self._committer = committer
        self._failures = failures
        self._first_processed = False
        self._log = get_logger(component="router")

    def process(self, messages: list[Any]) -> int:
        """Route each run of records from one partition to its task. Returns how many
        were processed.

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
            if task is None:  # records of a just-revoked partition are dropped
                i += 1
                continue
            try:
                after = task.process_run(messages, i)
            except OutputFailed as exc:
                processed += task.failed_at - i
                i = task.failed_at + 1
                self._output_failed(exc)
                continue
            except WorkerError:
                raise  # the worker's own failure (or a fail policy), not the record's
            except Exception as exc:
                processed += task.failed_at - i
                i = task.failed_at + 1
                self._processing_failed(task, messages[i - 1], exc)
                continue
            processed += after - i
            i = after
        if processed:
            self._counted(processed)
        return processed

    def _counted(self, processed: int) -> None:
        metrics = self._tasks.ctx.metrics
        metrics.processed_records.inc(processed)
        started = self._tasks.first_assignment_at
        if not self._first_processed and started is not None:
            self._first_processed = True
            elapsed = self._tasks.ctx.clock.monotonic() - started
            metrics.first_process_after_join.set(elapsed)

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
        running = self._tasks.running_actives()
        revived = running if self._committer.abort() else [task]
        self._tasks.revive(revived, "processing_error", describe(exc))

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
