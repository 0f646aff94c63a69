"""A task's stream time at its last commit: what the task resumes from, on any owner.

The per-record path keeps the live value in the processor context (``ctx.stream_time``,
worker/processing/graph.py); this keeps the value the task last committed. A commit
carries it three ways:

- as the metadata of the task's source offsets (Kafka Streams' layout,
  ``worker.processing.timestamps.encode_stream_time``), which any new owner reads back
  with the committed offsets, where the broker keeps offset metadata (the test broker
  drops it: docs/platform-notes.md);
- in each of the task's stores, in the batch of its data
  (``worker.state.store_format.STREAM_TIME``), for a restart on the same instance;
- in a stream-time marker in one of the task's logged changelogs
  (:mod:`worker.state.stream_time_marker`), when it advanced past the latest the
  changelog is known to carry (the last marker this owner committed, or the stores' value
  it resumed from): the restore and standby path record it in the store, so a task that
  moves or is restored from scratch resumes with it on any broker.

A starting task takes the latest of them. A task without a logged store (stateless, or
table stores only: a table's changelog is the user's topic) has offset metadata only.
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.assignment.task_id import TP
from worker.kafka.collector import RecordCollector
from worker.observability import Metrics
from worker.processing.timestamps import decode_stream_time, encode_stream_time
from worker.state.stream_time_marker import STREAM_TIME_KEY, marker_headers


class CommittedStreamTime:
    """One task's committed stream time (-1: none yet) and its gauge,
    ``worker_task_stream_time_ms{task}``; ``carrier``: the changelog partition its
    stream-time markers go to (None: the task has no logged store)."""

    __slots__ = ("value", "carrier", "_task", "_metrics", "_marked", "_marking")

    def __init__(self, task_id: str, metrics: Metrics, carrier: TP | None) -> None:
        self.value = -1
        self.carrier = carrier
        self._task = task_id
        self._metrics = metrics
        self._marked = -1  # the stream time of the last marker committed by this owner
        self._marking = -1  # the one sent in the commit under way

    def send_marker(self, collector: RecordCollector, stream_time: int) -> TP | None:
        """Commit step 1: write a stream-time marker after the changelog records when
        ``stream_time`` advanced past the latest the changelog carries; the changelog
        written, or None. A reader keeps the latest marker it read."""
        self._marking = -1
        if self.carrier is None or stream_time <= self._marked:
            return None
        topic, partition = self.carrier
        collector.send_marker(
            topic, partition, STREAM_TIME_KEY, marker_headers(stream_time), stream_time
        )
        self._marking = stream_time
        return self.carrier

    def marker_committed(self) -> None:
        """The commit that carried the marker went through (one that failed sends it
        again with the next)."""
        self._marked = max(self._marked, self._marking)

    def committed(self, stream_time: int) -> None:
        """The task committed with ``stream_time`` (never lowers the value)."""
        if stream_time > self.value:
            self.value = stream_time
        self._metrics.task_stream_time.labels(task=self._task).set(self.value)

    def resume(self, metadata: Iterable[str], stored: Iterable[int]) -> int:
        """The stream time to resume from: the latest of the committed offsets'
        ``metadata``, the stores' ``stored`` values and this object's own."""
        found = max((decode_stream_time(m) for m in metadata), default=-1)
        in_stores = max(stored, default=-1)
        # A store holds a stream time only once the changelog carries it (a commit writes
        # the marker before the stores; a restore reads it from the marker): no marker is
        # due until the stream time passes it.
        self._marked = max(self._marked, in_stores)
        self.committed(max(found, in_stores))
        return self.value

    @staticmethod
    def metadata(stream_time: int) -> str:
        """``stream_time`` as the metadata of the source offsets it is committed with."""
        return encode_stream_time(stream_time)

    def forget(self) -> None:
        """The task changed role: the group's and the stores' values are read again, and
        the first commit as an active writes a marker again."""
        self.value = self._marked = self._marking = -1

    def close(self) -> None:
        self._metrics.task_stream_time.remove_task(self._task)
