"""The two commit protocols, one per processing guarantee, over the running active tasks.

Both keep the architecture's invariant: a store's data and its changelog offset reach
RocksDB in one write batch, and only once the changelog records they describe are safe
in Kafka. They differ in what "safe" means and in how source offsets are committed.
A protocol that cannot complete raises :class:`CommitFailed`; the task manager then
drops the uncommitted work and revives the tasks from their last committed state.
Which protocol runs is chosen once, with the producer, by :mod:`worker.runtime.guarantee`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from worker.assignment.task_id import TP
from worker.errors import (
    GenerationMoved,
    KafkaUnavailable,
    ProduceFailed,
    ProducerFenced,
    RebalanceInProgress,
    TransactionAborted,
    WorkerError,
)
from worker.kafka.collector import RecordCollector
from worker.kafka.transactions import TransactionalProducer
from worker.state.release_marker import RELEASE_KEY, ReleaseMarker
from worker.tasks.task import Task

# Release markers to write with a commit: the changelog partitions and what they say.
Releases = Sequence[tuple[Sequence[TP], ReleaseMarker]]


# The reason of a commit the group refused (the member's generation moved on meanwhile).
GENERATION_MOVED = "generation_moved"


class CommitFailed(WorkerError):
    """The commit did not happen; nothing of it is in the stores. ``reason`` labels the metric."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"commit failed ({reason}): {detail}")
        self.reason = reason


class GroupOffsets(Protocol):
    """The group's committed source offsets, as the group member commits and reads them
    (narrow, so tests can fake it). ``metadata`` is a string per offset: the committing
    task's stream time (``worker.processing.timestamps.encode_stream_time``)."""

    def commit(
        self, offsets: Mapping[TP, int], metadata: Mapping[TP, str] | None = None
    ) -> None: ...

    def committed(self, partitions: Iterable[TP]) -> dict[TP, int | None]: ...

    def committed_with_metadata(
        self, partitions: Iterable[TP]
    ) -> dict[TP, tuple[int | None, str]]: ...


class CommitProtocol(Protocol):
    """One guarantee's commit over the running active tasks, and how to drop uncommitted work.

    ``releases`` are written after every task's changelog records and become readable
    only with the rest of the commit (worker/tasks/handover.py).
    """

    def __call__(self, tasks: Sequence[Task], releases: Releases = ()) -> dict[TP, int]: ...

    def abort(self) -> bool:
        """Drop what was sent since the last commit, where the guarantee can.

        Returns True when the uncommitted output of every running task was dropped (so
        every one of them must be revived), False when nothing could be unsent.
        """
        ...


def _send_releases(collector: RecordCollector, releases: Releases) -> None:
    for changelogs, marker in releases:
        headers = marker.headers()
        for topic, partition in changelogs:
            collector.send_marker(topic, partition, RELEASE_KEY, headers)


def _source_offsets(tasks: Sequence[Task]) -> tuple[dict[TP, int], dict[TP, str]]:
    """The source offsets to commit and, for each, its task's stream time as metadata."""
    offsets: dict[TP, int] = {}
    metadata: dict[TP, str] = {}
    for task in tasks:
        moved = task.source_offsets_to_commit()
        if moved:
            offsets.update(moved)
            note = task.offset_metadata()
            metadata.update(dict.fromkeys(moved, note))
    return offsets, metadata


class AtLeastOnceCommit:
    """at_least_once, in order:

    1. produce every running task's buffered store changes to its changelogs;
    2. flush the producer: every changelog and output record acknowledged;
    3. only then the release markers, flushed too: a marker is never readable before
       what it follows is safe;
    4. write each store's buffer with its acked changelog offset in one batch;
    5. commit the source offsets, with each task's stream time as their metadata,
       through the group member (fenced by generation); when
       the group has just begun rebalancing they stay pending for the next commit.

    A crash before 4 leaves the stores at the previous commit (the changelog tail is
    restored on restart); a crash between 4 and 5 reprocesses some input (at least once).
    """

    def __init__(
        self, collector: RecordCollector, group_offsets: GroupOffsets, timeout: float
    ) -> None:
        self._collector = collector
        self._group_offsets = group_offsets
        self._timeout = timeout

    def __call__(self, tasks: Sequence[Task], releases: Releases = ()) -> dict[TP, int]:
        for task in tasks:
            task.produce_changelogs()
        try:
            self._collector.flush(self._timeout)
            if releases:
                _send_releases(self._collector, releases)
                self._collector.flush(self._timeout)
        except ProduceFailed as exc:
            raise CommitFailed("produce_failed", str(exc)) from exc
        for task in tasks:
            task.commit_stores(self._collector.acked)
        offsets, metadata = _source_offsets(tasks)
        if offsets:
            try:
                self._group_offsets.commit(offsets, metadata)
            except RebalanceInProgress:
                # The group started a rebalance since the loop checked: the stores are
                # committed, the source offsets stay pending and go with the next commit.
                return {}
            except KafkaUnavailable as exc:
                raise CommitFailed("offset_commit_failed", str(exc)) from exc
        return offsets

    def abort(self) -> bool:
        """Nothing to abort: records already produced stay (at least once)."""
        return False


class ExactlyOnceCommit:
    """exactly_once_v2, in order:

    1. check that the member holds a generation to commit in (else RebalanceInProgress,
       before anything is sent: the commit waits, the transaction stays open);
    2. produce every running task's buffered store changes to its changelogs (inside the
       transaction the first record of this commit opened, with the outputs), then the
       release markers;
    3. commit the transaction with the source offsets (each task's stream time as their
       metadata) and the member's group metadata, read after the flush so that it names
       the newest generation; a group whose generation moved on meanwhile refuses the
       offsets and the transaction aborts (``generation_moved``);
    4. only then write each store's buffer with its changelog offset in one batch.

    A crash before 3 aborts the transaction (the next ``init_transactions`` of this
    transactional.id does it): stores and Kafka both stay at the previous commit. A crash
    between 3 and 4 leaves the stores one commit behind, and restoring the changelog tail
    from the stored offset (read_committed) repairs it. Nothing is ever wiped.
    """

    def __init__(
        self,
        collector: RecordCollector,
        transaction: TransactionalProducer,
        group_metadata: Callable[[], bytes],
    ) -> None:
        self._collector = collector
        self._transaction = transaction
        self._group_metadata = group_metadata

    def __call__(self, tasks: Sequence[Task], releases: Releases = ()) -> dict[TP, int]:
        self._group_metadata()
        for task in tasks:
            task.produce_changelogs()
        _send_releases(self._collector, releases)
        offsets, metadata = _source_offsets(tasks)
        try:
            self._transaction.commit(offsets, self._group_metadata, metadata)
        except ProducerFenced as exc:
            raise CommitFailed("fenced", str(exc)) from exc
        except GenerationMoved as exc:
            raise CommitFailed(GENERATION_MOVED, str(exc)) from exc
        except TransactionAborted as exc:
            raise CommitFailed("transaction_failed", str(exc)) from exc
        for task in tasks:
            task.commit_stores(self._collector.acked)
        return offsets

    def abort(self) -> bool:
        """Abort the open transaction: every task's output since the last commit is gone."""
        self._transaction.abort()
        return True


class GroupMemberView(GroupOffsets, Protocol):
    """What exactly-once also needs of the member: the generation that fences commits."""

    @property
    def commit_generation(self) -> tuple[int, str] | None:
        """(generation, member id) a commit names now; None while none can be made."""
        ...
