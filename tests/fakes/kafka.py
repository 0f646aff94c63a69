"""In-memory fakes of our Kafka adapters (``worker.kafka.collector``, ``worker.kafka.consumers``) and the group offsets.

Each fake has the public interface of the adapter it replaces, with the same method
names, parameters and defaults (``tests/unit/tasks/test_fakes.py`` checks this against the
real classes), plus helpers for tests to feed data in and read what happened. Nothing
here talks to a broker or starts a thread.

Offsets behave as Kafka's do: each partition is a log whose offsets only grow; a consumer
reads from an explicit position (``None``: the start of the log); the restore consumer
reports a partition's end (the high watermark) once it has read up to it, as librdkafka's
partition-EOF event does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.assignment.task_id import TP
from worker.kafka.consumers import FetchedBatch
from worker.state.stream_time_marker import STREAM_TIME_KEY, stream_time_of
from worker.testing.logs import LogRecord as FakeMessage

Record = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


@dataclass(frozen=True, slots=True)
class SentRecord:
    """A record handed to the collector: ``partition`` is None for sink records."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: Any = None
    offset: int | None = None  # changelog records: the offset the "broker" gave it
    timestamp: int = 0  # ms; 0: none given (the producer's clock)


class FakeCollector:
    """``RecordCollector`` in memory.

    Changelog records get consecutive offsets per partition (starting at
    ``next_offsets[tp]``, default 0) and are acknowledged at ``flush``, which is when
    ``acked`` moves, as the delivery callbacks move it during the real collector's flush.

    Test controls: ``fail_flush`` (raised by the next flushes, nothing acknowledged) and
    ``before_flush`` (called at the start of ``flush``, to observe the world at that moment).
    """

    def __init__(self, next_offsets: Mapping[TP, int] | None = None) -> None:
        self.acked: dict[TP, int] = {}
        self.sent: list[SentRecord] = []
        self.changelog: list[SentRecord] = []
        self.next_offsets: dict[TP, int] = dict(next_offsets or {})
        self.flushes = 0
        self.polls = 0
        self.fail_flush: BaseException | None = None
        self.before_flush: Callable[[], None] | None = None
        self._unacked: list[tuple[TP, int]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self.sent.append(SentRecord(topic, None, key, value, headers, None, timestamp))

    def send_changelog(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        times: Mapping[bytes, int] | None = None,
    ) -> None:
        tp = (topic, partition)
        for key, value in records:
            offset = self.next_offsets.get(tp, 0)
            self.next_offsets[tp] = offset + 1
            stamp = (times or {}).get(key, 0)
            self.changelog.append(SentRecord(topic, partition, key, value, None, offset, stamp))
            self._unacked.append((tp, offset))

    def send_marker(
        self,
        topic: str,
        partition: int,
        key: bytes,
        headers: list[tuple[str, bytes]],
        timestamp: int = 0,
    ) -> None:
        tp = (topic, partition)
        offset = self.next_offsets.get(tp, 0)
        self.next_offsets[tp] = offset + 1
        record = SentRecord(topic, partition, key, None, headers, offset, timestamp)
        self.changelog.append(record)
        self._unacked.append((tp, offset))

    def poll(self) -> None:
        self.polls += 1

    def flush(self, timeout: float) -> None:
        self.flushes += 1
        if self.before_flush is not None:
            self.before_flush()
        if self.fail_flush is not None:
            raise self.fail_flush
        for tp, offset in self._unacked:
            if offset > self.acked.get(tp, -1):
                self.acked[tp] = offset
        self._unacked.clear()

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)

    def changelog_for(self, topic: str, partition: int) -> list[tuple[bytes, bytes | None]]:
        """(key, value) of every changelog record sent to one partition, in order, but
        the stream-time markers (:meth:`stream_time_markers`)."""
        return [
            (r.key or b"", r.value)
            for r in self.changelog
            if r.topic == topic and r.partition == partition and r.key != STREAM_TIME_KEY
        ]

    def stream_time_markers(self, topic: str, partition: int) -> list[int]:
        """The stream times of the markers sent to one changelog partition, in order."""
        return [
            stream_time_of(r.headers)
            for r in self.changelog
            if r.topic == topic and r.partition == partition and r.key == STREAM_TIME_KEY
        ]


@dataclass
class FakeGroupOffsets:
    """The group member's offset commit API (``worker.tasks.commit_protocols.GroupOffsets``).

    ``commits`` lists every successful commit; ``offsets`` is the group's current view.
    Test controls: ``fail_commit`` and ``before_commit`` (called with the offsets).
    """

    offsets: dict[TP, int] = field(default_factory=dict)
    commits: list[dict[TP, int]] = field(default_factory=list)
    metadata: dict[TP, str] = field(default_factory=dict)  # committed with the offsets
    fail_commit: BaseException | None = None
    before_commit: Callable[[Mapping[TP, int]], None] | None = None

    def commit(self, offsets: Mapping[TP, int], metadata: Mapping[TP, str] | None = None) -> None:
        if self.before_commit is not None:
            self.before_commit(offsets)
        if self.fail_commit is not None:
            raise self.fail_commit
        self.commits.append(dict(offsets))
        self.offsets.update(offsets)
        self.metadata.update(metadata or {})

    def committed(self, partitions: Iterable[TP]) -> dict[TP, int | None]:
        return {tp: self.offsets.get(tp) for tp in partitions}

    def committed_with_metadata(self, partitions: Iterable[TP]) -> dict[TP, tuple[int | None, str]]:
        return {tp: (self.offsets.get(tp), self.metadata.get(tp, "")) for tp in partitions}


class _FakeLogs:
    """Partition logs and explicit positions, shared by both consumer fakes."""

    def __init__(self) -> None:
        self.logs: dict[TP, list[Record]] = {}
        self.high_watermarks: dict[TP, int] = {}
        self.positions: dict[TP, int] = {}
        self.added: list[dict[TP, int | None]] = []  # every add() call, for assertions
        self.paused: set[TP] = set()
        self._fetched: set[TP] = set()
        self.headers: dict[tuple[TP, int], Any] = {}  # (partition, offset) -> its headers
        self.timestamps: dict[tuple[TP, int], int] = {}  # (partition, offset) -> ms, if not 0
        self.closed = False

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
        timestamp: int = 0,
    ) -> int:
        """Append a record at the end of the partition; return its offset."""
        tp = (topic, partition)
        offset = self.end_offset(tp)
        self.logs.setdefault(tp, []).append((offset, key, value))
        if headers:
            self.headers[(tp, offset)] = headers
        if timestamp:
            self.timestamps[(tp, offset)] = timestamp
        self.high_watermarks[tp] = offset + 1
        return offset

    def skip_offsets(self, topic: str, partition: int, count: int) -> None:
        """Leave a gap of ``count`` offsets, as compaction or transaction markers do."""
        tp = (topic, partition)
        self.high_watermarks[tp] = self.end_offset(tp) + count

    def end_offset(self, tp: TP) -> int:
        """The high watermark: the offset the next record will get."""
        return self.high_watermarks.get(tp, 0)

    def add(self, positions: Mapping[TP, int | None]) -> None:
        self.added.append(dict(positions))
        for tp, offset in positions.items():
            self.positions[tp] = 0 if offset is None else offset

    def remove(self, partitions: Iterable[TP]) -> None:
        for tp in list(partitions):
            self.positions.pop(tp, None)
            self.paused.discard(tp)

    @property
    def assigned(self) -> frozenset[TP]:
        return frozenset(self.positions)

    def pause(self, partitions: Iterable[TP]) -> None:
        self.paused.update(tp for tp in partitions if tp in self.positions)

    def resume(self, partitions: Iterable[TP]) -> None:
        self.paused.difference_update(partitions)

    def high_watermark(self, partition: TP) -> int | None:
        """As librdkafka's cached watermark: known once the partition has been fetched."""
        return self.end_offset(partition) if partition in self._fetched else None

    def close(self) -> None:
        self.closed = True

    def _take(self, tp: TP, budget: int) -> list[Record]:
        position = self.positions[tp]
        taken = [r for r in self.logs.get(tp, []) if r[0] >= position][:budget]
        if taken:
            self.positions[tp] = taken[-1][0] + 1
        if not taken or len(taken) < budget:
            # Nothing more to read: the position moves over any trailing gap.
            self.positions[tp] = max(self.positions[tp], self.end_offset(tp))
        return taken


class FakeDataConsumer(_FakeLogs):
    """``DataConsumer``: reads the assigned source partitions from explicit positions.

    Feed it with ``append``; ``consume`` returns :class:`FakeMessage` objects, partitions
    in sorted order, at most ``max_records`` in all, none of a paused partition. A
    partition whose position reached the high watermark is reported once by
    ``take_ends`` (again after new records arrive and are read), like the partition-EOF
    events the real one takes out of its batches.
    """

    def __init__(self) -> None:
        super().__init__()
        self._ends: dict[TP, int] = {}
        self._eof_reported: dict[TP, int] = {}

    def consume(self, max_records: int, timeout: float) -> list[Any]:
        messages: list[Any] = []
        for tp in sorted(self.positions):
            budget = max_records - len(messages)
            if budget <= 0:
                break
            if tp in self.paused:
                continue
            self._fetched.add(tp)
            for offset, key, value in self._take(tp, budget):
                messages.append(
                    FakeMessage(
                        tp[0],
                        tp[1],
                        offset,
                        key,
                        value,
                        self.timestamps.get((tp, offset), 0),
                        self.headers.get((tp, offset)),
                    )
                )
            end = self.end_offset(tp)
            if self.positions[tp] >= end and self._eof_reported.get(tp) != end:
                self._ends[tp] = self._eof_reported[tp] = end
        return messages

    def take_ends(self) -> dict[TP, int]:
        ends, self._ends = self._ends, {}
        return ends

    def add(self, positions: Mapping[TP, int | None]) -> None:
        super().add(positions)
        for tp in positions:
            self._eof_reported.pop(tp, None)
            self._ends.pop(tp, None)

    def remove(self, partitions: Iterable[TP]) -> None:
        partitions = list(partitions)
        super().remove(partitions)
        for tp in partitions:
            self._eof_reported.pop(tp, None)
            self._ends.pop(tp, None)


class FakeRestoreConsumer(_FakeLogs):
    """``RestoreConsumer``: reads changelogs from explicit positions, reporting their ends.

    ``fetch`` returns at most ``max_records`` messages, partitions in sorted order. A
    partition whose position reached the high watermark is reported once in
    ``end_offsets`` (again after new records arrive and are read), like librdkafka's
    partition-EOF event. ``fetches`` counts the calls.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fetches = 0
        self._eof_reported: dict[TP, int] = {}

    def fetch(self, max_records: int, timeout: float) -> FetchedBatch:
        self.fetches += 1
        batch = FetchedBatch([], {})
        taken = 0
        for tp in sorted(self.positions):
            if tp in self.paused:
                continue
            self._fetched.add(tp)
            records = self._take(tp, max_records - taken) if taken < max_records else []
            batch.messages += (
                FakeMessage(tp[0], tp[1], o, k, v, _headers=self.headers.get((tp, o)))
                for o, k, v in records
            )
            taken += len(records)
            end = self.end_offset(tp)
            if self.positions[tp] >= end and self._eof_reported.get(tp) != end:
                batch.end_offsets[tp] = end
                self._eof_reported[tp] = end
        return batch

    def add(self, positions: Mapping[TP, int | None]) -> None:
        super().add(positions)
        for tp in positions:
            self._eof_reported.pop(tp, None)
