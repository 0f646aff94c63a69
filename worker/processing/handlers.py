"""What happens to a source record that cannot be deserialised, is too large, or keeps failing.

Three policies, named after Kafka Streams' exception handlers (KIP-1033, KIP-1034):

- ``fail``: the worker stops with an error naming the record (exit code 1);
- ``log_and_continue``: the record is skipped: a throttled warning and
  ``worker_skipped_records_total{reason}`` (reasons: deserialization_error,
  record_too_large, invalid_timestamp, processing_error);
- ``dead_letter``: skipped as above, and written to ``<application.id>-dlq`` with the
  error and the record's source coordinates in headers. It goes through the task's
  record collector, so under exactly-once the dead-letter record is in the same
  transaction as the source offset that moves past it: both happen, or neither.

Only error paths call into this module; the per-record happy path never does. A
processing error is first retried (each attempt from the task's last committed state);
:mod:`worker.tasks.failures` counts the attempts, stops the worker under ``fail`` and
hands this handler only the records whose retries are used up.
"""

from __future__ import annotations

import enum
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.clock import Clock
from worker.errors import FatalError
from worker.events import RECORD_SKIPPED
from worker.observability import Metrics, ThrottledLog
from worker.processing.context import Record, RecordSink
from worker.processing.timestamps import INVALID_TIMESTAMP, InvalidTimestamp

# Skip reasons: the label of worker_skipped_records_total and of the DLQ header.
DESERIALIZATION_ERROR = "deserialization_error"
RECORD_TOO_LARGE = "record_too_large"
PROCESSING_ERROR = "processing_error"
PUNCTUATION_ERROR = "punctuation_error"  # a punctuator's run, skipped: no record to keep

HEADER_PREFIX = "__worker.errors."
_MAX_HEADER_BYTES = 8192  # error texts and stack traces are cut to this
LOG_INTERVAL_S = 1.0  # at most one "record.skipped" line a second per task; the rest counted


class ExceptionPolicy(enum.Enum):
    FAIL = "fail"
    LOG_AND_CONTINUE = "log_and_continue"
    DEAD_LETTER = "dead_letter"


class RecordFailed(FatalError):
    """A record could not be deserialised or processed and its policy is ``fail``."""


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A source record as it arrived, with its coordinates (only built on error paths)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Any = None

    @classmethod
    def of(cls, record: Record) -> BadRecord:
        """The record as it arrived, built only on error paths."""
        return cls(
            record.topic() or "",
            record.partition() or 0,
            record.offset() or 0,
            record.timestamp()[1],
            record.key(),
            record.value(),
            record.headers(),
        )

    @property
    def coordinates(self) -> str:
        return f"{self.topic}-{self.partition}@{self.offset}"

    @property
    def size(self) -> int:
        return len(self.key or b"") + len(self.value or b"")


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _cut(text: str) -> bytes:
    return text.encode("utf-8", "replace")[:_MAX_HEADER_BYTES]


class RecordErrorHandler:
    """Applies one task's policies to its bad records. Processing thread only.

    ``deserialization`` covers undecodable keys or values and records over
    ``max.record.bytes``; ``processing`` covers records whose processing raised on every
    attempt. Raises :class:`RecordFailed` where the policy is ``fail``.
    """

    def __init__(
        self,
        task_id: str,
        deserialization: ExceptionPolicy,
        processing: ExceptionPolicy,
        dlq_topic: str,
        sink: RecordSink,
        metrics: Metrics,
        clock: Clock,
        log: Any,
        max_record_bytes: int = -1,
    ) -> None:
        self.task_id = task_id
        self.deserialization = deserialization
        self.processing = processing
        self.dlq_topic = dlq_topic
        self.max_record_bytes = max_record_bytes
        self._sink = sink
        self._metrics = metrics
        self._warnings = ThrottledLog(log, clock.monotonic, LOG_INTERVAL_S)
        self._counted: dict[tuple[str, int], int] = {}  # highest offset counted per partition
        # Highest offset dead-lettered per partition since the commit that covers it: a
        # revival that keeps what was produced (at-least-once, a record's own failure)
        # replays these records, and they must not be dead-lettered again (issue 32).
        self._lettered: dict[tuple[str, int], int] = {}

    def deserialization_failed(self, record: BadRecord, exc: BaseException) -> None:
        """A key or value that does not deserialise: fail, or skip the record."""
        self._apply(record, self.deserialization, DESERIALIZATION_ERROR, exc, "")

    def too_large(self, record: BadRecord) -> None:
        """A record over ``max.record.bytes`` takes the deserialisation policy."""
        exc = ValueError(
            f"record of {record.size} bytes is over max.record.bytes ({self.max_record_bytes})"
        )
        self._apply(record, self.deserialization, RECORD_TOO_LARGE, exc, "")

    def invalid_timestamp(self, record: BadRecord, exc: BaseException) -> None:
        """A record whose timestamp is invalid (negative, or the extractor failed) takes
        the deserialisation policy: like an undecodable one, it never reaches a processor."""
        self._apply(record, self.deserialization, INVALID_TIMESTAMP, exc, "")

    def processing_failed(self, record: BadRecord, exc: BaseException, stacktrace: str) -> None:
        """A record whose processing raised on every attempt: fail, or skip it."""
        self._apply(record, self.processing, PROCESSING_ERROR, exc, stacktrace)

    def punctuation_skipped(self, punctuation: str, exc: BaseException) -> None:
        """A punctuator failed on every attempt under a skipping policy: its run is
        skipped, counted and logged (also under ``dead_letter``: there is no record)."""
        self._metrics.skipped_records.labels(reason=PUNCTUATION_ERROR).inc()
        self._warn(
            "punctuation.skipped",
            punctuation=punctuation,
            policy=self.processing.value,
            error=describe(exc),
        )

    def _apply(
        self,
        record: BadRecord,
        policy: ExceptionPolicy,
        reason: str,
        exc: BaseException,
        stacktrace: str,
    ) -> None:
        if policy is ExceptionPolicy.FAIL:
            key = (
                "processing.exception.handler"
                if reason == PROCESSING_ERROR
                else "default.deserialization.exception.handler"
            )
            raise RecordFailed(
                f"task {self.task_id}: record {record.coordinates} {reason.replace('_', ' ')}:"
                f" {describe(exc)} ({key} = fail)"
            ) from exc
        tp = (record.topic, record.partition)
        if policy is ExceptionPolicy.DEAD_LETTER and record.offset > self._lettered.get(tp, -1):
            self._dead_letter(record, reason, exc, stacktrace)
            self._lettered[tp] = record.offset
        # A revival reprocesses from the last commit, so the same record may be skipped
        # again (and, under exactly-once, dead-lettered again in the new transaction, the
        # first one aborted): count and log each record once.
        if record.offset <= self._counted.get(tp, -1):
            return
        self._counted[tp] = record.offset
        if policy is ExceptionPolicy.DEAD_LETTER:
            self._metrics.dead_lettered_records.labels(reason=reason).inc()
        self._metrics.skipped_records.labels(reason=reason).inc()
        self._log_skip(record, policy, reason, exc)

    def letters_lost(self) -> None:
        """What was dead-lettered since the last commit may be gone (a transaction aborted,
        a send failed): the records are dead-lettered again when they come back."""
        self._lettered.clear()

    def letters_committed(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """The group committed ``offsets`` (next offset per partition): the letters before
        them are behind the commit, never replayed, and need no memory."""
        for tp in [tp for tp, offset in self._lettered.items() if offset < offsets.get(tp, -1)]:
            del self._lettered[tp]

    def _dead_letter(
        self, record: BadRecord, reason: str, exc: BaseException, stacktrace: str
    ) -> None:
        """Write the record with its error and coordinates in headers (KIP-1034's layout).

        A record over the size bound keeps its key (when the key alone fits) but not its
        value, which the producer might refuse; the coordinates find it in the source.
        """
        key, value = record.key, record.value
        headers: list[tuple[str, bytes]] = list(record.headers or ())
        if reason == RECORD_TOO_LARGE:
            value = None
            if self.max_record_bytes >= 0 and len(key or b"") > self.max_record_bytes:
                key = None
            headers.append((HEADER_PREFIX + "size", str(record.size).encode()))
        headers += [
            (HEADER_PREFIX + "reason", reason.encode()),
            (HEADER_PREFIX + "exception", type(exc).__name__.encode()),
            (HEADER_PREFIX + "message", _cut(str(exc))),
            (HEADER_PREFIX + "topic", record.topic.encode()),
            (HEADER_PREFIX + "partition", str(record.partition).encode()),
            (HEADER_PREFIX + "offset", str(record.offset).encode()),
            (HEADER_PREFIX + "timestamp", str(record.timestamp).encode()),
            (HEADER_PREFIX + "task", self.task_id.encode()),
        ]
        if stacktrace:
            headers.append((HEADER_PREFIX + "stacktrace", _cut(stacktrace)))
        # The source record's own time, unless that is what is wrong with it (0: now): a
        # broker refuses one too far ahead (log.message.timestamp.after.max.ms), and the
        # refused send would revive the task for ever.
        refused = isinstance(exc, InvalidTimestamp) and exc.timestamp == record.timestamp
        timestamp = 0 if refused else max(record.timestamp, 0)
        self._sink.send(self.dlq_topic, key, value, timestamp, headers)

    def _log_skip(
        self, record: BadRecord, policy: ExceptionPolicy, reason: str, exc: BaseException
    ) -> None:
        self._warn(
            RECORD_SKIPPED,
            reason=reason,
            policy=policy.value,
            record=record.coordinates,
            error=describe(exc),
        )

    def _warn(self, event: str, **fields: Any) -> None:
        """One warning a second at most; the lines left out are counted in the next one."""
        self._warnings.warning(event, **fields)


def format_stacktrace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
