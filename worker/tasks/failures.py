"""Decides what happens after a processor raised on a source record: retry, skip or fail.

A failed record may have left half its work behind: store writes in the write buffer,
output records already handed to the producer. So the task manager always closes the
task dirty and revives it from its last committed state, then the record is processed
again. This class only counts the attempts per record and says when they are used up;
the task manager does the rest (deciding apart from doing). Processing thread only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from worker.assignment.task_id import TP
from worker.processing.handlers import ExceptionPolicy


class FailureDecision(enum.Enum):
    RETRY = "retry"  # revive; the record runs again from the last committed state
    SKIP = "skip"  # revive; the record is skipped when it arrives again (log or dead letter)
    FAIL = "fail"  # stop the worker


class ProcessingFailures:
    """Attempts per source record (topic, partition, offset) that raised.

    A record is tried ``1 + max_retries`` times; after the last failure the policy
    decides. Counts of records below a committed source offset are forgotten.
    """

    def __init__(self, policy: ExceptionPolicy, max_retries: int) -> None:
        self.policy = policy
        self.max_retries = max_retries
        self._attempts: dict[tuple[str, int, int], int] = {}

    def failed(self, topic: str, partition: int, offset: int) -> tuple[FailureDecision, int]:
        """Count one more failure of the record; return what to do and the attempts so far."""
        coordinates = (topic, partition, offset)
        attempts = self._attempts.get(coordinates, 0) + 1
        self._attempts[coordinates] = attempts
        if attempts <= self.max_retries:
            return FailureDecision.RETRY, attempts
        del self._attempts[coordinates]
        if self.policy is ExceptionPolicy.FAIL:
            return FailureDecision.FAIL, attempts
        return FailureDecision.SKIP, attempts

    def attempts(self, topic: str, partition: int, offset: int) -> int:
        return self._attempts.get((topic, partition, offset), 0)

    def forget_committed(self, offsets: Mapping[TP, int]) -> None:
        """Drop the counts of records the group has committed past (they succeeded)."""
        if not self._attempts:
            return
        for coordinates in list(self._attempts):
            topic, partition, offset = coordinates
            committed = offsets.get((topic, partition))
            if committed is not None and offset < committed:
                del self._attempts[coordinates]
