"""What happens to a source record whose processing raised: retry it, skip it or stop.

A failed record may have left half its work behind: store writes in the write buffer,
output records already handed to the producer. So its task is always revived from its
last committed state (the router does that) and the record is processed again, up to
``1 + processing.exception.max.retries`` times (once for a :class:`SerdeError`: bytes that
do not decode never will). After the last attempt the processing
exception policy decides: ``fail`` stops the worker; ``log_and_continue`` and
``dead_letter`` mark the record, and whenever it arrives again it is skipped through the
task's :class:`~worker.processing.handlers.RecordErrorHandler` (logged, counted once,
dead-lettered inside the transaction that commits past it).

A punctuator that raises takes the same path, named by its
:class:`~worker.processing.punctuators.Punctuation` instead of a record: the task is
revived (so the punctuation runs again: a stream one when reprocessing crosses its
boundary again, a wall one an interval after the task runs again), attempts are counted
per punctuator until one of its runs completes, and after the last one ``fail`` stops the
worker while the skipping policies skip its next run (logged and counted with reason
``punctuation_error``: a punctuation has no input record to dead-letter).

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
from worker.processing.punctuators import Punctuation
from worker.serde import SerdeError

Coordinates = tuple[str, int, int]  # topic, partition, offset


class RunFailed(WorkerError):
    """Processing a run of records raised on ``record``, at ``index`` in the batch.

    The records before it were processed. The caller decides what the failure means (the
    record's fault, the producer's, or the worker's own: ``error``, also the cause) and
    resumes after ``index``. Raised only on the failure path: the task's per-record loop
    pays nothing for it until something raises. A punctuator that raised is a run of its
    own: ``record`` is its :class:`Punctuation`, ``index`` -1.
    """

    def __init__(self, index: int, record: Any, error: Exception) -> None:
        super().__init__(f"{where(record)} (index {index}) raised {describe(error)}")
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
        # The same for punctuators, by (processor, punctuator): apart from the records',
        # since commits never forget them (see skip_punctuation, punctuation_succeeded).
        self._punctuator_attempts: dict[tuple[str, str], int] = {}
        self._marked_punctuators: dict[tuple[str, str], BaseException] = {}

    def failed(self, record: Any, error: Exception) -> tuple[FailureDecision, int]:
        """Count one more failed attempt at ``record`` (or a :class:`Punctuation`);
        return what follows and the count.

        After the last attempt, under ``fail`` this raises :class:`RecordFailed` (the
        worker stops, its tasks close dirty); otherwise the record (the punctuator's
        next run) is marked to skip.
        """
        attempts_of: dict[Any, int]
        key: Any
        punctuation = isinstance(record, Punctuation)
        if punctuation:
            attempts_of, key = self._punctuator_attempts, record.identity
        else:
            attempts_of, key = self._attempts, (record.topic(), record.partition(), record.offset())
        attempts = attempts_of.get(key, 0) + 1
        attempts_of[key] = attempts
        # Bytes that do not decode (a table value a processor reads, say) decode no
        # better on the next attempt: no retry, the policy at once.
        if attempts <= self.max_retries and not isinstance(error, SerdeError):
            decision = FailureDecision.RETRY
        else:
            del attempts_of[key]
            fail = self.errors.processing is ExceptionPolicy.FAIL
            decision = FailureDecision.FAIL if fail else FailureDecision.SKIP
        self._log.warning(
            "record.processing_failed",
            record=where(record),
            attempt=attempts,
            decision=decision.value,
            error=describe(error),
        )
        if decision is FailureDecision.FAIL:
            raise RecordFailed(
                f"task {self.errors.task_id}: {where(record)} failed"
                f" {attempts} times: {describe(error)} (processing.exception.handler = fail)"
            ) from error
        if decision is FailureDecision.SKIP:
            if punctuation:
                self._marked_punctuators[key] = error
            else:
                self.marked[key] = (error, format_stacktrace(error))
        return decision, attempts

    def skip_punctuation(self, punctuation: Punctuation) -> bool:
        """True when ``punctuation`` is to be skipped: its punctuator failed on every
        attempt and the policy skips. The mark is used up by this one skipped run."""
        if not self._marked_punctuators:
            return False
        error = self._marked_punctuators.pop(punctuation.identity, None)
        if error is None:
            return False
        self.errors.punctuation_skipped(str(punctuation), error)
        return True

    def punctuation_succeeded(self, punctuation: Punctuation) -> None:
        """A run of the punctuator completed: its failed attempts are forgotten."""
        if self._punctuator_attempts:
            self._punctuator_attempts.pop(punctuation.identity, None)

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
        """Failed attempts at a record so far (0 once committed past or marked)."""
        return self._attempts.get((topic, partition, offset), 0)

    def forget_committed(self, offsets: Mapping[TP, int]) -> None:
        """Drop the counts, marks and dead-letter memory of records the group has
        committed past."""
        self.errors.letters_committed(offsets)
        for kept in (self._attempts, self.marked):
            if kept:
                for coordinates in [c for c in kept if c[2] < offsets.get(c[:2], -1)]:
                    del kept[coordinates]


def where(record: Any) -> str:
    """What failed, as errors and logs name it: a record's coordinates, or a punctuator."""
    if isinstance(record, Punctuation):
        return str(record)
    return f"record {record.topic()}-{record.partition()}@{record.offset()}"
