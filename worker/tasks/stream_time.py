"""A task's stream time at its last commit: what the task resumes from, on any owner.

The per-record path keeps the live value in the processor context (``ctx.stream_time``,
worker/processing/graph.py); this keeps the value the task last committed. A commit
writes it twice: as the metadata of the task's source offsets (Kafka Streams' layout,
``worker.processing.timestamps.encode_stream_time``), which any new owner reads back with
the committed offsets, and in each of the task's stores, in the batch of its data
(``worker.state.store_format.STREAM_TIME``), for brokers that drop offset metadata (the
test broker does: docs/platform-notes.md). A starting task takes the latest of them.
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.observability import Metrics
from worker.processing.timestamps import decode_stream_time, encode_stream_time


class CommittedStreamTime:
    """One task's committed stream time (-1: none yet) and its gauge,
    ``worker_task_stream_time_ms{task}``."""

    __slots__ = ("value", "_task", "_metrics")

    def __init__(self, task_id: str, metrics: Metrics) -> None:
        self.value = -1
        self._task = task_id
        self._metrics = metrics

    def committed(self, stream_time: int) -> None:
        """The task committed with ``stream_time`` (never lowers the value)."""
        if stream_time > self.value:
            self.value = stream_time
        self._metrics.task_stream_time.labels(task=self._task).set(self.value)

    def resume(self, metadata: Iterable[str], stored: Iterable[int]) -> int:
        """The stream time to resume from: the latest of the committed offsets'
        ``metadata``, the stores' ``stored`` values and this object's own."""
        found = max((decode_stream_time(m) for m in metadata), default=-1)
        self.committed(max(found, max(stored, default=-1)))
        return self.value

    @staticmethod
    def metadata(stream_time: int) -> str:
        """``stream_time`` as the metadata of the source offsets it is committed with."""
        return encode_stream_time(stream_time)

    def forget(self) -> None:
        """The task changed role: the group's and the stores' values are read again."""
        self.value = -1

    def close(self) -> None:
        self._metrics.task_stream_time.remove_task(self._task)
