"""Deleting the records of repartition topics below the committed offsets
(DeleteRecords), so these topics do not grow without bound (Kafka Streams' KIP-204).

After each successful commit the committer hands over the source offsets it committed;
those of repartition topics are remembered, and at most every
``repartition.purge.interval.ms`` one DeleteRecords request asks the broker to drop every
record before them. The request is fire-and-forget: the processing thread never waits on
it, a new one is sent only when the previous one has settled, and a failure is retried on
a later round. Records below a committed offset were consumed and their effects committed
(under exactly-once, in the same transaction), so deleting them never loses anything.

A broker without DeleteRecords (the embedded test broker closes the connection on it) is
detected: an "unsupported" error, or failures on every request before any succeeded
(:data:`GIVE_UP_AFTER`), turns purging off for the process, logged once
(``repartition.purge_unsupported``): never a crash. Purging uses an admin client of its
own, so a broker that drops the connection disturbs no other request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient

from worker.assignment.task_id import TP
from worker.clock import Clock
from worker.config import Settings
from worker.events import REPARTITION_PURGE_UNSUPPORTED, REPARTITION_PURGED
from worker.kafka.client_config import base_config
from worker.kafka.error_classifier import kafka_error
from worker.observability import get_logger

# Failed requests in a row, with none ever succeeding, that mean "not supported here".
GIVE_UP_AFTER = 3
_UNSUPPORTED = {
    ck.KafkaError._UNSUPPORTED_FEATURE,
    ck.KafkaError.UNSUPPORTED_VERSION,
    ck.KafkaError.INVALID_REQUEST,
}
_TIMEOUT_S = 10.0


class RepartitionPurge:
    """Purges ``topics`` (the repartition topics) on the processing thread's schedule."""

    def __init__(
        self,
        topics: set[str],
        interval_ms: int,
        clock: Clock,
        delete_records: Callable[[list[ck.TopicPartition]], Mapping[Any, Future[Any]]],
    ) -> None:
        self._topics = topics
        self._interval = interval_ms / 1000.0
        self._clock = clock
        self._delete_records = delete_records
        self._next = clock.monotonic() + self._interval
        self._latest: dict[TP, int] = {}
        self._purged: dict[TP, int] = {}
        self._pending: dict[TP, Future[Any]] = {}
        self._sent: dict[TP, int] = {}
        self._failures = 0
        self._succeeded = False
        self.enabled = bool(topics)
        self._log = get_logger(component="repartition_purge")

    def committed(self, offsets: Mapping[TP, int]) -> None:
        """The group committed ``offsets`` (next offset to read per partition): purge
        below them when the interval has passed and no request is in flight."""
        if not self.enabled:
            return
        for tp, offset in offsets.items():
            if tp[0] in self._topics and offset > self._latest.get(tp, 0):
                self._latest[tp] = offset
        if self._pending and not self._settle():
            return
        now = self._clock.monotonic()
        if now < self._next or not self.enabled:
            return
        wanted = {tp: off for tp, off in self._latest.items() if off > self._purged.get(tp, 0)}
        if not wanted:
            return
        self._next = now + self._interval
        request = [ck.TopicPartition(t, p, off) for (t, p), off in sorted(wanted.items())]
        try:
            futures = self._delete_records(request)
        except (ck.KafkaException, ValueError, TypeError) as exc:
            self._failed(exc)
            return
        self._pending = {(tp.topic, tp.partition): f for tp, f in futures.items()}
        self._sent = wanted

    def _settle(self) -> bool:
        """True when the request in flight has settled (its outcome recorded)."""
        if not all(f.done() for f in self._pending.values()):
            return False
        pending, self._pending = self._pending, {}
        errors = [f.exception() for f in pending.values() if f.exception() is not None]
        if errors:
            self._failed(errors[0])
            return True
        self._succeeded = True
        self._failures = 0
        self._purged.update(self._sent)
        self._log.info(REPARTITION_PURGED, partitions=len(self._sent))
        return True

    def _failed(self, exc: BaseException | None) -> None:
        self._failures += 1
        error = kafka_error(exc) if exc is not None else None
        unsupported = error is not None and error.code() in _UNSUPPORTED
        if unsupported or (not self._succeeded and self._failures >= GIVE_UP_AFTER):
            self.enabled = False
            self._log.warning(
                REPARTITION_PURGE_UNSUPPORTED,
                error=str(exc),
                failures=self._failures,
                hint="the broker does not delete records: repartition topics keep theirs",
            )
        else:
            self._log.info("repartition.purge_failed", error=str(exc), failures=self._failures)


def repartition_purge(settings: Settings, topics: set[str], clock: Clock) -> RepartitionPurge:
    """A purge over an admin client of its own, connected on its first request."""
    client: AdminClient | None = None

    def delete_records(request: list[ck.TopicPartition]) -> Mapping[Any, Future[Any]]:
        nonlocal client
        if client is None:
            client = AdminClient(base_config(settings, "admin"))
        client.poll(0)
        result: Mapping[Any, Future[Any]] = client.delete_records(
            request, request_timeout=_TIMEOUT_S
        )
        return result

    return RepartitionPurge(topics, settings.repartition_purge_interval_ms, clock, delete_records)
