"""What happens to a source record whose processing raised: retry it, skip it or stop.

A failed record may have left half its work behind: store writes in the write buffer,
output records already handed to the producer. So its task is always revived from its
last committed state (the router does that) and the record is processed again, up to
``1 + processing.exception.max.retries`` times. After the last attempt the processing
exception policy decides: ``fail`` stops the worker; ``log_and_continue`` and
``dead_letter`` mark the record, and whenever it arrives again it is skipped through the
task's :class:`~worker.processing.handlers.RecordErrorHandler` (logged, counted once,
dead-lettered inside the transaction that commits past it).

:class:`RunFailed` is how a task says which record raised; :class:`ProcessingFailures` is
the one owner of a task's attempts and skip marks. Processing thread only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from worker.assignment.task_id import TP
from worker.errors import WorkerError
from worker.processing.handlers import (
    BadRecord,
    ExceptionPolicy,
    RecordErrorHandler,
    RecordFailed,
    describe,
    format_stacktrace,
)

Coordinates = tuple[str, int, int]  # topic, partition, offset


class RunFailed(WorkerError):
    """Processing a run of records raised on ``record``, at ``index`` in the batch.

    The records before it were processed. The caller decides what the failure means (the
    record's fault, the producer's, or the worker's own: ``error``, also the cause) and
    resumes after ``index``. Raised only on the failure path: the task's per-record loop
    pays nothing for it until something raises.
    """

    def __init__(self, index: int, record: Any, error: Exception) -> None:
        where = f"{record.topic()}-{record.partition()}@{record.offset()}"
        super().__init__(f"record {where} (index {index}) raised {describe(error)}")
        self.index = index
        self.record = record
        self.error = error


class FailureDecision(enum.Enum):
    RETRY = "retry"  # revive; the record runs again from the last committed state
    SKIP = "skip"  # revive; the record is skipped when it arrives again (log or dead letter)
    FAIL = "fail"  # stop the worker


class ProcessingFailures:
    """One active task's failed attempts per source record and the records to skip.

    Kept across the task's revivals (each attempt is one); a commit that moves past a
    record forgets both its count and its mark.
    """

    def __init__(self, errors: RecordErrorHandler, max_retries: int, log: Any) -> None:
        self.errors = errors
        self.max_retries = max_retries
        self._log = log
        self._attempts: dict[Coordinates, int] = {}
        # Records whose retries are used up, with the error of their last attempt. The
        # task reads this once per run: empty, its per-record loop skips nothing.
        self.marked: dict[Coordinates, tuple[BaseException, str]] = {}

    def failed(self, record: Any, error: Exception) -> tuple[FailureDecision, int]:
        """Count one more failed attempt at ``record``; return what follows and the count.

        After the last attempt, under ``fail`` this raises :class:`RecordFailed` (the
        worker stops, its tasks close dirty); otherwise the record is marked to skip.
        """
        coordinates = (record.topic(), record.partition(), record.offset())
        attempts = self._attempts.get(coordinates, 0) + 1
        self._attempts[coordinates] = attempts
        if attempts <= self.max_retries:
            decision = FailureDecision.RETRY
        else:
            del self._attempts[coordinates]
            fail = self.errors.processing is ExceptionPolicy.FAIL
            decision = FailureDecision.FAIL if fail else FailureDecision.SKIP
        topic, partition, offset = coordinates
        self._log.warning(
            "record.processing_failed",
            record=f"{topic}-{partition}@{offset}",
            attempt=attempts,
            decision=decision.value,
            error=describe(error),
        )
        if decision is FailureDecision.FAIL:
            raise RecordFailed(
                f"task {self.errors.task_id}: record {topic}-{partition}@{offset} failed"
                f" {attempts} times: {describe(error)} (processing.exception.handler = fail)"
            ) from error
        if decision is FailureDecision.SKIP:
            self.marked[coordinates] = (error, format_stacktrace(error))
        return decision, attempts

    def skip(self, msg: Any) -> bool:
        """True when ``msg`` is marked: the policy is applied to it instead of processing.

        The mark stays until a commit moves past the record: a revival for a later
        record's failure brings this one back, and it must be skipped again.
        """
        found = self.marked.get((msg.topic(), msg.partition(), msg.offset()))
        if found is None:
            return False
        self.errors.processing_failed(BadRecord.of(msg), *found)
        return True

    def attempts(self, topic: str, partition: int, offset: int) -> int:
        return self._attempts.get((topic, partition, offset), 0)

    def forget_committed(self, offsets: Mapping[TP, int]) -> None:
        """Drop the counts and marks of records the group has committed past."""
        for kept in (self._attempts, self.marked):
            if kept:
                for coordinates in [c for c in kept if c[2] < offsets.get(c[:2], -1)]:
                    del kept[coordinates]
