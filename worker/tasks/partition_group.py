"""A task's fetched records from several partitions, and which one it processes next.

A task that reads more than one partition (a join's stream and table, a merge, a
repartition topic beside a table) processes them in timestamp order, as Kafka Streams'
``PartitionGroup`` does: the records of each partition wait here as fetched, and the
next one processed is always the head record with the smallest timestamp across the
task's partitions (ties: :func:`ranked_partitions`). Within a partition, records keep
their offset order whatever their timestamps.

When one of the partitions has nothing buffered, the task cannot know whether its next
record is older than the others' heads. ``max.task.idle.ms`` says how long it waits:

* 0 (the default): only while that partition is not known to be at its end, that is
  until its first fetch reports a record or its end, and while records arrived after
  the last end it reported (the broker holds data not fetched yet). A partition at its
  end is not waited for.
* N > 0: as 0, and then up to N ms more for a partition at its end to receive data.
* -1: never; whatever is buffered is processed.

A partition's end is what its fetch reported last (librdkafka's partition-EOF event,
which under ``read_committed`` is the last stable offset): at its end when that offset
is past the last record received from it. Processing while an empty partition is not
waited for any more (at its end under 0, past its deadline under N) may put records out
of order; each such record is counted (``worker_enforced_processing_total``), as in
Kafka Streams. Under -1 nothing is counted.

The records are the consumer's own message objects, held until processed: they are not
consumed before (the task's consumed offsets move only as it processes them), so a
commit never covers them and a task that stops reading (revoked, revived) drops them
with its group, to fetch them again from its committed offsets. A partition that holds
more than ``max_buffered`` records after a processing pass is paused, so one waiting
partition's data cannot fill memory, and resumed once it drained below that.

Not thread-safe: the processing thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.assignment.task_id import TP
from worker.clock import Clock
from worker.processing import timestamps
from worker.processing.built_topology import Subtopology

IDLE_DISABLED = -1
_COMPACT_AT = 4096  # a queue's consumed head is dropped from its list past this many records

TimestampOf = Callable[[Any], int]


def ranked_partitions(subtopology: Subtopology, partition: int) -> list[TP]:
    """The task's partitions in tie-breaking order: on equal timestamps the earlier wins.

    Tables come first, then the other sources, each in the order they were added: a
    table version stamped at a stream record's time is valid from that time, so the
    stream record joins it. (Kafka Streams leaves ties to its priority queue's order.)
    """
    sources = sorted(subtopology.sources, key=lambda s: s.table_store is None)
    return [(s.topic, partition) for s in sources]


def timestamp_reader(setting: str, stream_time: Callable[[], int]) -> TimestampOf:
    """How the group reads a record's timestamp: the ``timestamp.extractor`` the task's
    graph uses (given the task's stream time), so the order is that of the times the
    records are processed at. An extractor runs again when the record is processed: it
    must give the same answer twice. A timestamp the graph would refuse (the extractor
    raised, not an int >= 0) orders as -1: the record goes first, to the task's
    bad-record policy."""
    extractor = timestamps.resolve(setting)
    if extractor is timestamps.record_time:
        return _record_time

    def extracted(record: Any) -> int:
        try:
            found = extractor(record, stream_time())
        except Exception:
            return -1
        return found if type(found) is int and found >= 0 else -1

    return extracted


def _record_time(record: Any) -> int:
    return record.timestamp()[1]  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Run:
    """Records to process next: ``records[start:stop]``, all of ``partition``.
    ``enforced``: processed although an empty partition is no longer waited for."""

    partition: TP
    records: list[Any]
    start: int
    stop: int
    enforced: bool


class _Queue:
    """One partition's buffered records; those before ``head`` are processed."""

    __slots__ = ("tp", "rank", "records", "head", "head_time", "last_offset", "end", "deadline")

    def __init__(self, tp: TP, rank: int) -> None:
        self.tp = tp
        self.rank = rank
        self.records: list[Any] = []
        self.head = 0
        self.head_time = 0  # the head record's timestamp, while there is one
        self.last_offset = -1  # of the last record received
        self.end = -1  # the end offset its fetch last reported; -1: none yet
        self.deadline: float | None = None  # waiting for it, at its end, until then

    @property
    def size(self) -> int:
        return len(self.records) - self.head

    @property
    def at_end(self) -> bool:
        """Known to hold nothing more on the broker (a fetch reported its end since the
        last record received)."""
        return self.end > self.last_offset


class PartitionGroup:
    """The buffered records of one task's partitions and the timestamp-ordered choice."""

    def __init__(
        self,
        partitions: Sequence[TP],
        idle_ms: int,
        clock: Clock,
        timestamp_of: TimestampOf,
        max_buffered: int,
    ) -> None:
        self._queues = [_Queue(tp, rank) for rank, tp in enumerate(partitions)]
        self._by_tp = {q.tp: q for q in self._queues}
        self._idle_s = idle_ms / 1000.0
        self._waits = idle_ms != IDLE_DISABLED
        self._clock = clock
        self._timestamp_of = timestamp_of
        self._max_buffered = max_buffered
        self._paused: set[TP] = set()
        self._waiting = False

    @property
    def partitions(self) -> list[TP]:
        return [q.tp for q in self._queues]

    @property
    def buffered(self) -> int:
        """Records fetched and not processed yet."""
        return sum(q.size for q in self._queues)

    def add(self, messages: Sequence[Any], start: int, stop: int) -> None:
        """Buffer ``messages[start:stop]``, all from one of the group's partitions."""
        first = messages[start]
        q = self._by_tp[(first.topic(), first.partition())]
        if not q.size:
            q.head_time = self._timestamp_of(first)
        q.records += messages[start:stop]
        q.last_offset = messages[stop - 1].offset()
        q.deadline = None

    def reached_end(self, tp: TP, offset: int) -> None:
        """A fetch of ``tp`` reported its end at ``offset`` (the next offset it will have)."""
        q = self._by_tp[tp]
        if offset > q.end:
            q.end = offset

    @property
    def waiting(self) -> bool:
        """Whether the last :meth:`next_run` held back buffered records to wait for an
        empty partition (what the task's unavailability is charged to)."""
        return self._waiting

    def next_run(self) -> Run | None:
        """The records to process next, or None while the task waits (or has none).

        1. Every empty partition: wait while it is not known to be at its end (unless
           idling is disabled); at its end, wait until its deadline under N > 0 (set the
           first time it is found empty there); past that, go on, enforced.
        2. Take the partition whose head is the smallest (timestamp, rank), and its
           records up to the first that would lose to the next best head.
        """
        best: _Queue | None = None
        second: _Queue | None = None
        enforced = False
        self._waiting = False
        for q in self._queues:
            if q.head < len(q.records):
                q.deadline = None
                if best is None or (q.head_time, q.rank) < (best.head_time, best.rank):
                    best, second = q, best
                elif second is None or (q.head_time, q.rank) < (second.head_time, second.rank):
                    second = q
            elif self._waits:
                if not q.at_end:
                    q.deadline = None
                    self._waiting = self.buffered > 0
                    return None
                if self._idle_s > 0:
                    now = self._clock.monotonic()
                    if q.deadline is None:
                        q.deadline = now + self._idle_s
                    if now < q.deadline:
                        self._waiting = self.buffered > 0
                        return None
                enforced = True
        if best is None:
            return None
        return Run(best.tp, best.records, best.head, self._run_end(best, second), enforced)

    def _run_end(self, best: _Queue, second: _Queue | None) -> int:
        """Where ``best``'s run stops: at the first record after its head that ``second``'s
        head precedes (its timestamp is kept as the head's next)."""
        records, end = best.records, len(best.records)
        if second is None:
            return end
        bound, timestamp_of = second.head_time, self._timestamp_of
        if best.rank > second.rank:
            bound -= 1  # a tie goes to second
        i = best.head + 1
        while i < end:
            t = timestamp_of(records[i])
            if t > bound:
                best.head_time = t
                break
            i += 1
        return i

    def consumed(self, run: Run, upto: int) -> None:
        """``run.records[run.start:upto]`` are processed (or skipped, or failed)."""
        q = self._by_tp[run.partition]
        if q.records is not run.records:
            return  # cleared meanwhile
        if upto >= len(q.records):
            q.records, q.head = [], 0
            return
        if upto != run.stop:  # stopped early: the next head's time is not known yet
            q.head_time = self._timestamp_of(q.records[upto])
        q.head = upto
        if upto > _COMPACT_AT and upto * 2 > len(q.records):
            del q.records[:upto]
            q.head = 0

    def flow(self) -> tuple[list[TP], list[TP]]:
        """(partitions to pause, partitions to resume): those holding more than the bound
        after processing, and paused ones back under it."""
        pause, resume = [], []
        for q in self._queues:
            over = q.size > self._max_buffered
            if over and q.tp not in self._paused:
                self._paused.add(q.tp)
                pause.append(q.tp)
            elif not over and q.tp in self._paused:
                self._paused.discard(q.tp)
                resume.append(q.tp)
        return pause, resume

    def clear(self) -> None:
        """Drop every buffered record and what the fetches reported (the task stopped
        reading: it reads them again from its committed offsets)."""
        for q in self._queues:
            q.records, q.head, q.last_offset, q.end, q.deadline = [], 0, -1, -1, None
        self._paused.clear()
        self._waiting = False
