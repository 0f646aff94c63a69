"""The admin client: topic metadata, idempotent topic creation, end offsets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.errors import FatalError, KafkaUnavailable
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import topic_exists


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


class PendingOffsets:
    """End offsets asked for by :meth:`Admin.request_end_offsets`, collected without waiting.

    For the processing loop, which must not block on the broker: it asks once, checks
    :meth:`ready` on later iterations, and takes :meth:`result` when it is. The futures are
    completed by librdkafka's background thread, so nothing here has to be polled.
    Thread-safety: one thread uses an instance.
    """

    def __init__(self, futures: Mapping[TP, Future[Any]]) -> None:
        self._futures = dict(futures)

    def ready(self) -> bool:
        """True once every partition has an answer or an error (or the request timed out)."""
        return all(future.done() for future in self._futures.values())

    def wait(self, timeout: float) -> dict[TP, int]:
        """Every answer that comes within ``timeout`` seconds per partition (blocking)."""
        for future in self._futures.values():
            with contextlib.suppress(ck.KafkaException, TimeoutError):
                future.result(timeout)
        return self.result()

    def result(self) -> dict[TP, int]:
        """Log-end offset of each partition answered so far; never waits.

        Partitions that failed (unknown topic, timeout) or have no answer yet are left
        out, so call it after :meth:`ready` to get everything there is to get.
        """
        found: dict[TP, int] = {}
        for tp, future in self._futures.items():
            if not future.done() or future.cancelled() or future.exception() is not None:
                continue
            offset = int(future.result().offset)
            if offset >= 0:
                found[tp] = offset
        return found


class Admin:
    """Topic metadata and idempotent creation of internal topics."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._admin = AdminClient(base_config(settings, "admin"))

    def partition_counts(self, topics: Iterable[str], timeout: float = 10.0) -> dict[str, int]:
        """Partition count of each existing topic; missing topics are absent from the result."""
        self._admin.poll(0)  # hands over the admin client's queued log lines
        try:
            metadata = self._admin.list_topics(timeout=timeout)
        except ck.KafkaException as exc:
            raise KafkaUnavailable(f"cannot read topic metadata: {exc}") from exc
        counts: dict[str, int] = {}
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                counts[topic] = len(meta.partitions)
        return counts

    def topic_names(self, timeout: float = 10.0) -> set[str]:
        """Every topic the broker has. Raises KafkaUnavailable without an answer."""
        self._admin.poll(0)
        try:
            metadata = self._admin.list_topics(timeout=timeout)
        except ck.KafkaException as exc:
            raise KafkaUnavailable(f"cannot read topic metadata: {exc}") from exc
        return set(metadata.topics)

    def create_topics(self, specs: Sequence[TopicSpec], timeout: float = 30.0) -> list[str]:
        """Create the topics that do not exist yet; return the names created."""
        if not specs:
            return []
        new = [
            NewTopic(s.name, s.partitions, self._settings.replication_factor, config=dict(s.config))
            for s in specs
        ]
        created: list[str] = []
        for name, future in self._admin.create_topics(new, request_timeout=timeout).items():
            try:
                future.result(timeout)
                created.append(name)
            except ck.KafkaException as exc:
                if not topic_exists(exc):
                    raise FatalError(f"cannot create topic {name}: {exc.args[0]}") from exc
        return created

    def end_offsets(self, partitions: Sequence[TP], timeout: float = 5.0) -> dict[TP, int]:
        """Log-end offset (ListOffsets latest, read_uncommitted) of each partition.

        For the group leader's lag estimate. Partitions that fail (unknown topic, timeout)
        are left out rather than failing the rest. On the test broker the answer is too
        low after multi-record batches (platform-facts.md): callers must treat it as a
        lower bound. Raises KafkaUnavailable when the request cannot be made at all.
        """
        return self.request_end_offsets(partitions, timeout).wait(timeout)

    def request_end_offsets(self, partitions: Iterable[TP], timeout: float = 5.0) -> PendingOffsets:
        """Start a ListOffsets (latest, read_uncommitted) for ``partitions``; never waits.

        The non-blocking twin of :meth:`end_offsets`, for the processing loop (whether
        input waits for an active task that is not consuming yet). Every future is
        settled within ``timeout`` seconds. The test broker's answers are a lower bound
        (see :meth:`end_offsets`). Raises KafkaUnavailable when the request cannot be
        made at all.
        """
        self._admin.poll(0)  # hands over the admin client's queued log lines
        wanted = {
            ck.TopicPartition(t, p): OffsetSpec.latest() for t, p in dict.fromkeys(partitions)
        }
        if not wanted:
            return PendingOffsets({})
        try:
            futures = self._admin.list_offsets(
                wanted,
                isolation_level=ck.IsolationLevel.READ_UNCOMMITTED,
                request_timeout=timeout,
            )
        except (ck.KafkaException, ValueError, TypeError) as exc:
            raise KafkaUnavailable(f"cannot list end offsets: {exc}") from exc
        return PendingOffsets({(tp.topic, tp.partition): f for tp, f in futures.items()})
