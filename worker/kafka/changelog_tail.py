"""The last records of changelog partitions, read before a windowed store restores them.

A windowed store's changelog carries the store's progress (its observed time) in each
commit; the last commit's is a lower bound of where a restore of the whole partition
ends, and it lets every restored batch skip the windows already expired by then
(``worker.state.window_store``). Only a hint: a partition that does not answer in time,
or an error, leaves it out and the restore judges by its batches alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import confluent_kafka as ck

from worker.assignment.task_id import TP
from worker.config import Settings
from worker.kafka.client_config import base_config, fetch_config
from worker.kafka.error_classifier import is_partition_eof
from worker.observability import get_logger

TAIL_RECORDS = 1000  # a commit puts the store's progress last among its records
# librdkafka's logical offset "n records before the end" is RD_KAFKA_OFFSET_TAIL_BASE - n.
_OFFSET_TAIL_BASE = -2000

Records = list[tuple[bytes, bytes | None]]


class ChangelogTailReader:
    """Reads up to ``records`` records before the end of each partition asked for.

    One consumer for the worker's run, made at the first read (most apps have no windowed
    store), ``read_committed`` as the restore consumer: what it reads, the restore applies.
    Not thread-safe.
    """

    def __init__(self, settings: Settings, records: int = TAIL_RECORDS) -> None:
        self._settings = settings
        self._records = records
        self._consumer: Any = None
        self._log = get_logger(component="changelog_tail")

    def _connect(self) -> Any:
        if self._consumer is None:
            config = base_config(self._settings, "changelog-tail")
            config.update(fetch_config(self._settings))
            config.update(
                {
                    "group.id": f"{self._settings.application_id}-changelog-tail",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 10,
                }
            )
            self._consumer = ck.Consumer(config)
        return self._consumer

    def read(self, partitions: Iterable[TP], timeout: float = 5.0) -> dict[TP, Records]:
        """The keyed records of each partition's tail, in offset order; a partition that
        reaches no end within ``timeout`` is absent, and a client error leaves all out."""
        wanted = set(partitions)
        if not wanted:
            return {}
        found: dict[TP, Records] = {tp: [] for tp in wanted}
        ended: set[TP] = set()
        offset = _OFFSET_TAIL_BASE - self._records
        try:
            consumer = self._connect()
            consumer.assign([ck.TopicPartition(t, p, offset) for t, p in sorted(wanted)])
            try:
                deadline = time.monotonic() + timeout
                while len(ended) < len(wanted) and time.monotonic() < deadline:
                    for msg in consumer.consume(10000, 0.2):
                        self._take(msg, found, ended)
            finally:
                consumer.unassign()
        except ck.KafkaException as exc:
            self._log.warning("changelog_tail.failed", error=str(exc))
            return {}
        return {tp: found[tp] for tp in ended}

    @staticmethod
    def _take(msg: Any, found: dict[TP, Records], ended: set[TP]) -> None:
        tp: TP = (msg.topic(), msg.partition())
        err = msg.error()
        if err is None:
            key = msg.key()
            if key is not None and tp in found:
                found[tp].append((key, msg.value()))
        elif is_partition_eof(err):
            ended.add(tp)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
