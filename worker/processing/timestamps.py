"""Record timestamps: the extractor (setting ``timestamp.extractor``) and its checks.

A timestamp is an ``int`` of milliseconds since the epoch, >= 0, from the source record
to every output and changelog write it causes (floats are refused: faust's float seconds
broke its windows). The default is the Kafka record's own timestamp (CreateTime or
LogAppendTime, whichever the topic keeps). A user extractor is named ``module:attr``: a
callable ``(record, stream_time_ms) -> int``, given the source record as confluent-kafka
presents it and the task's stream time before this record (-1 before the first), as
Kafka Streams' ``TimestampExtractor.extract(record, partitionTime)``. Prefer the record's
headers or key to its value: decoding the value only for its time costs a full decode.

A task's stream time travels with its committed source offsets, as the offsets' metadata
(:func:`encode_stream_time`, Kafka Streams' layout), so a task resumes with it after a
restart or a move without reprocessing anything.

A timestamp that is not an int >= 0, or an extractor that raises, is
:class:`InvalidTimestamp`: the record goes to the bad-record policy (fail, skip and count,
dead letter), with :data:`INVALID_TIMESTAMP` as the reason. Kafka's record timestamp is -1
when the record has none (a pre-0.10 message format), which is invalid too.

So is one more than ``timestamp.max.future.ms`` ahead of the wall clock
(:class:`FutureBound`): stream time only ever rises, and it is committed, so a single
record stamped a century ahead would otherwise expire every TTL entry of its partition,
close every window and make every later record late, for good (issue 32). Kafka 4's
broker refuses such records at produce time by default (``log.message.timestamp.after.max.ms``,
one hour), but a topic may allow them and an extractor reading the value bypasses the broker.
"""

from __future__ import annotations

import base64
import importlib
import time
from collections.abc import Callable
from typing import Any

from worker.clock import MAX_TIME_MS
from worker.errors import ConfigError, WorkerError

SETTING = "timestamp.extractor"
RECORD_TIME = "record"  # the setting's default: the Kafka record's timestamp
INVALID_TIMESTAMP = "invalid_timestamp"  # the bad-record reason (metric label, DLQ header)
NEGATIVE = "must be >= 0 (ms since the epoch)"
FUTURE_SETTING = "timestamp.max.future.ms"

# (record, stream_time_ms) -> ms. The record is a worker.processing.context.Record, named
# Any here because the context imports this module (it checks forwarded timestamps).
TimestampExtractor = Callable[[Any, int], int]


class InvalidTimestamp(WorkerError, ValueError):
    """The record's timestamp is unusable (negative, not an int, or the extractor raised):
    handle the record by the bad-record policy; its processing never starts."""

    def __init__(self, timestamp: object, reason: str) -> None:
        super().__init__(f"invalid timestamp {timestamp!r}: {reason}")
        self.timestamp = timestamp
        self.reason = reason


class FutureBound:
    """The latest timestamp a task accepts: the wall clock + ``timestamp.max.future.ms``.

    ``horizon`` is a cached bound, only ever too low: the per-record path compares a
    timestamp that would raise stream time with it (one comparison) and calls
    :meth:`admits` only above it, which reads the clock again. ``max_future_ms`` < 0:
    no bound. Processing thread only.
    """

    __slots__ = ("horizon", "max_future_ms", "_wall_ms")

    def __init__(self, max_future_ms: int, wall_ms: Callable[[], int]) -> None:
        self.max_future_ms = max_future_ms
        self._wall_ms = wall_ms
        self.horizon = MAX_TIME_MS if max_future_ms < 0 else -1

    def admits(self, timestamp: int) -> bool:
        """True when ``timestamp`` is at most the bound ahead of the wall clock now."""
        if timestamp <= self.horizon:
            return True
        self.horizon = self._wall_ms() + self.max_future_ms
        return timestamp <= self.horizon

    def refusal(self, timestamp: int) -> InvalidTimestamp:
        """The error for a ``timestamp`` that :meth:`admits` refused."""
        ahead = timestamp - (self.horizon - self.max_future_ms)
        return InvalidTimestamp(
            timestamp,
            f"{ahead} ms ahead of the wall clock, over {FUTURE_SETTING} ({self.max_future_ms})",
        )


UNBOUNDED = FutureBound(-1, lambda: 0)  # for graphs built without a bound (unit tests)


def record_time(record: Any, stream_time_ms: int) -> int:
    """The default extractor: the Kafka record's timestamp, whatever its type."""
    return record.timestamp()[1]


WALL_CLOCK = "worker.processing.timestamps:wall_clock"  # the setting's value for it


def wall_clock(record: Any, stream_time_ms: int) -> int:
    """The processing time: the system clock, in ms (Kafka Streams'
    ``WallclockTimestampExtractor``). Outputs and changelog records then carry when they
    were written, as they did before records had timestamps; the tools that find stalls
    in those timestamps (benchmarks, the demo) run with it. Not for event-time logic: a
    replay gets other times."""
    return time.time_ns() // 1_000_000


def resolve(spec: str) -> TimestampExtractor:
    """The extractor a ``timestamp.extractor`` value names, imported at start-up.

    Raises:
        ConfigError: (key ``timestamp.extractor``) not ``record`` nor ``module:attr``, the
            module or attribute cannot be loaded, or it is not callable.
    """
    if spec == RECORD_TIME:
        return record_time
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(SETTING, f"expected {RECORD_TIME!r} or module:attr, got {spec!r}")
    try:
        target: object = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(SETTING, f"cannot load {spec}: {exc}") from exc
    if not callable(target):
        raise ConfigError(SETTING, f"{spec} is not callable (got {type(target).__name__})")
    return target  # type: ignore[return-value]


def extract(extractor: TimestampExtractor, record: Any, stream_time_ms: int) -> int:
    """The record's timestamp by ``extractor``, checked.

    The per-record path may inline the default (``record.timestamp()[1]`` and a sign
    check) rather than call this; the checks must stay the same.

    Raises:
        InvalidTimestamp: the extractor raised, or returned anything but an int >= 0.
    """
    try:
        timestamp = extractor(record, stream_time_ms)
    except Exception as exc:
        raise InvalidTimestamp(None, f"the extractor raised {type(exc).__name__}: {exc}") from exc
    return check(timestamp)


def check(timestamp: object) -> int:
    """``timestamp`` if it is an int >= 0 (a bool is not).

    Raises:
        InvalidTimestamp: otherwise.
    """
    if type(timestamp) is not int:
        raise InvalidTimestamp(
            timestamp, f"must be int milliseconds, got {type(timestamp).__name__}"
        )
    if timestamp < 0:
        raise InvalidTimestamp(timestamp, NEGATIVE)
    return timestamp


_STREAM_TIME_MAGIC = 1  # Kafka Streams' TopicPartitionMetadata version 1: magic + 8-byte time


def encode_stream_time(stream_time_ms: int) -> str:
    """``stream_time_ms`` as committed offset metadata: base64 of a version byte and the
    time as a big-endian signed 64-bit integer, the layout Kafka Streams reads back."""
    raw = bytes([_STREAM_TIME_MAGIC]) + stream_time_ms.to_bytes(8, "big", signed=True)
    return base64.b64encode(raw).decode("ascii")


def decode_stream_time(metadata: str | None) -> int:
    """The stream time :func:`encode_stream_time` wrote into ``metadata``; -1 (unknown)
    for no metadata or any other content (a version 2 from Kafka Streams reads too)."""
    if not metadata:
        return -1
    try:
        raw = base64.b64decode(metadata, validate=True)
    except ValueError:
        return -1
    if len(raw) < 9 or raw[0] not in (1, 2):
        return -1
    return max(int.from_bytes(raw[1:9], "big", signed=True), -1)
