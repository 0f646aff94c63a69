"""The in-process stand-in for Kafka's I/O under the test driver: topic logs, and the
record collector the driver's tasks write to.

Only Kafka I/O is faked; the tasks, graphs, stores and commit steps that run the records
are the worker's own. Records are partitioned as the worker's producer does (murmur2 of
the key bytes, ``worker/partitioner.py``); a record without a key goes to partition 0, so
runs stay deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from worker.assignment.task_id import TP
from worker.partitioner import partition_for

Headers = list[tuple[str, bytes]] | None


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a topic partition, with the methods of ``confluent_kafka.Message``
    that a task reads."""

    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    _value: bytes | None
    _timestamp: int = 0
    _headers: Headers = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)  # (TIMESTAMP_CREATE_TIME, ms)

    def headers(self) -> Headers:
        return self._headers

    def error(self) -> None:
        return None


class TopicLogs:
    """Every topic's partitions as lists of records; offsets grow from 0 per partition.

    ``on_append`` is called with each record appended to a topic in ``watched`` (the
    topology's source topics): the driver queues it for processing.
    """

    def __init__(self, partitions: Callable[[str], int]) -> None:
        self._partitions = partitions
        self.records: dict[TP, list[LogRecord]] = {}
        # every topic's records in the order they were written, across its partitions
        self.by_topic: dict[str, list[LogRecord]] = {}
        self.watched: set[str] = set()
        self.on_append: Callable[[LogRecord], None] = lambda record: None

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None = None,
    ) -> LogRecord:
        if partition is None:
            partition = 0 if not key else partition_for(key, self._partitions(topic))
        log = self.records.setdefault((topic, partition), [])
        record = LogRecord(topic, partition, len(log), key, value, timestamp, headers)
        log.append(record)
        self.by_topic.setdefault(topic, []).append(record)
        if topic in self.watched:
            self.on_append(record)
        return record


class LogCollector:
    """``RecordCollector``'s interface over :class:`TopicLogs`: writes are acknowledged at
    once (``acked``: the last offset of each changelog partition written)."""

    def __init__(self, logs: TopicLogs) -> None:
        self._logs = logs
        self.acked: dict[TP, int] = {}

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self._logs.append(topic, key, value, timestamp, headers)

    def send_changelog(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        times: Mapping[bytes, int] | None = None,
    ) -> None:
        stamps = times or {}
        for key, value in records:
            written = self._logs.append(topic, key, value, stamps.get(key, 0), None, partition)
            self.acked[(topic, partition)] = written.offset()

    def send_marker(
        self,
        topic: str,
        partition: int,
        key: bytes,
        headers: list[tuple[str, bytes]],
        timestamp: int = 0,
    ) -> None:
        written = self._logs.append(topic, key, None, timestamp, headers, partition)
        self.acked[(topic, partition)] = written.offset()

    def poll(self) -> None:
        return None

    def flush(self, timeout: float) -> None:
        return None

    def close(self, timeout: float = 10.0) -> None:
        return None
