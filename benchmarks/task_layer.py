"""The worker's task layer in the benchmark's own process, without the group or the loop:
the tasks of an assignment, restored and running, fed with fetched records by hand.

The per-record benchmark and the punctuator scan build the same parts as a worker
(``build_task_parts``) over a broker, with an in-memory book for the source offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck

from benchmarks.harness import BenchmarkFailed, new_application_id
from benchmarks.kafka_io import create_topics, raw_consumer
from worker.assignment.model import Assignment
from worker.assignment.task_id import TP, TaskId
from worker.clock import SystemClock
from worker.config import Settings, load
from worker.kafka.collector import RecordCollector
from worker.kafka.consumers import DataConsumer, RestoreConsumer, WatermarkReader
from worker.kafka.error_classifier import is_partition_eof
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.runtime.guarantee import choose_guarantee
from worker.state.directory import StateDirectory
from worker.state.restore import ChangelogReader
from worker.state.rocksdb_env import RocksDBEnv
from worker.tasks.parts import TaskParts, build_task_parts
from worker.tasks.task_context import TaskContext


class OffsetBook:
    """The group member's commit API, kept in memory (the one part not the worker's own)."""

    commit_generation = (1, "benchmark")

    def __init__(self) -> None:
        self.offsets: dict[TP, int] = {}
        self.metadata: dict[TP, str] = {}

    def commit(self, offsets: Mapping[TP, int], metadata: Mapping[TP, str] | None = None) -> None:
        self.offsets.update(offsets)
        self.metadata.update(metadata or {})

    def committed(self, partitions: Iterable[TP]) -> dict[TP, int | None]:
        return {tp: self.offsets.get(tp) for tp in partitions}

    def committed_with_metadata(self, partitions: Iterable[TP]) -> dict[TP, tuple[int | None, str]]:
        return {tp: (self.offsets.get(tp), self.metadata.get(tp, "")) for tp in partitions}


@dataclass
class RunningTasks:
    parts: TaskParts
    collector: RecordCollector
    state_dir: Path  # the application's state directory

    def feed(self, messages: list[Any], batch: int) -> int:
        """Process ``messages`` in batches of ``batch``, punctuating after each as the
        loop does; the punctuations run."""
        fired = 0
        for i in range(0, len(messages), batch):
            self.parts.router.process(messages[i : i + batch])
            fired += self.parts.router.punctuate()
            self.collector.poll()
        return fired


def settings_for(bootstrap: str, application_id: str) -> Settings:
    overrides = {
        "bootstrap.servers": bootstrap,
        "application.id": application_id,
        "num.standby.replicas": "0",
        # Records are fed by hand, not fetched: no fetch reports a partition's end, so a
        # task reading several partitions must not wait for one (the example app's
        # joins, a topology with a table beside its stream).
        "max.task.idle.ms": "-1",
    }
    return load(None, overrides, environ={}).settings


@contextmanager
def running_tasks(
    workdir: Path, bootstrap: str, topology: BuiltTopology, application_id: str, partitions: int
) -> Iterator[RunningTasks]:
    """The active tasks ``0_0 .. 0_<partitions-1>`` of ``topology``, restored; closed
    (dirty: nothing more is committed) on the way out. Its store changelogs are created
    first (a worker creates them at start-up; without them a task never restores)."""
    changelogs = [
        topic
        for st in topology.subtopologies
        for store, topic in st.changelog_topics(application_id).items()
        if topic != store  # a table's changelog is its own source topic
    ]
    create_topics(
        bootstrap,
        dict.fromkeys(changelogs, partitions),
        {topic: {"cleanup.policy": "compact"} for topic in changelogs},
    )
    settings = settings_for(bootstrap, application_id)
    metrics, clock = Metrics(), SystemClock()
    state_dir = StateDirectory(workdir / application_id, application_id)
    state_dir.open()
    guarantee = choose_guarantee(settings, state_dir.process_id, metrics)
    collector = guarantee.collector
    consumer, restore = DataConsumer(settings), RestoreConsumer(settings)
    watermarks = WatermarkReader(settings)
    env = RocksDBEnv(settings.rocksdb_memory_bytes)
    task_ctx = TaskContext(settings, state_dir, env, collector, metrics, clock)
    reader: ChangelogReader[Any] = ChangelogReader(
        restore, metrics, settings.restore_batch_records, clock
    )
    book = OffsetBook()
    parts = build_task_parts(
        topology,
        task_ctx,
        reader,
        consumer,
        book,
        guarantee.commit_protocol(book),
        high_watermarks=watermarks.read,
    )
    try:
        tasks = frozenset(TaskId(0, p) for p in range(partitions))
        parts.manager.on_assigned(Assignment(tasks, frozenset(), frozenset(), {}, {}, 1))
        deadline = time.monotonic() + 60
        while parts.tasks.restoring():
            if time.monotonic() > deadline:
                raise BenchmarkFailed("the tasks did not finish restoring in 60s")
            parts.tasks.restore_step(timeout=0.1)
        yield RunningTasks(parts, collector, workdir / application_id)
    finally:
        parts.tasks.close_all(clean=False)
        for part in (collector, consumer, restore, watermarks):
            part.close()
        state_dir.close()


def fetch(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` as the consumer's own messages, all partitions to the end."""
    consumer = raw_consumer(bootstrap, new_application_id("bench-fetch"))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in meta.partitions])
        messages: list[Any] = []
        ended: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ended) < len(meta.partitions) and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 1.0):
                if msg.error() is None:
                    messages.append(msg)
                elif is_partition_eof(msg.error()):
                    ended.add(msg.partition() or 0)
        return messages
    finally:
        consumer.close()
