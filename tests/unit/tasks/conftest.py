"""A small counting topology, and a task manager wired to real RocksDB and fake Kafka.

The topology has every kind of state: a stream source ``events``, a table ``labels``
(read-only store whose changelog is its topic) and a logged store ``counts`` (changelog
``app-counts-changelog``), one processor and one sink::

    events ──> count(counts, labels) ──> out
    labels (table)

Stores, the state directory and `.checkpoint` files are real, on ``tmp_path``; the
producer, both consumers and the group's offset commits are the fakes in ``tests.fakes``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeCollector, FakeDataConsumer, FakeGroupOffsets, FakeRestoreConsumer
from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.config import Settings
from worker.observability import Metrics
from worker.processing import ProcessorContext, Topology
from worker.processing.built_topology import BuiltTopology
from worker.serde import JSON, STR
from worker.state.directory import StateDirectory
from worker.state.restore import ChangelogReader
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.tasks.commit_protocols import AtLeastOnceCommit, CommitProtocol
from worker.tasks.committer import TaskCommitter
from worker.tasks.manager import TaskManager
from worker.tasks.parts import TaskParts, build_task_parts
from worker.tasks.registry import Tasks
from worker.tasks.router import RecordRouter
from worker.tasks.task_context import TaskContext

APP = "app"
EVENTS = "events"
LABELS = "labels"
OUT = "out"
COUNTS = "counts"
COUNTS_CHANGELOG = f"{APP}-{COUNTS}-changelog"
CHECKPOINT_INTERVAL_S = 60.0
T00 = TaskId(0, 0)
T01 = TaskId(0, 1)
T02 = TaskId(0, 2)


def count_events(ctx: ProcessorContext, key: str, value: Any) -> None:
    """Count events per key; forward the count with the key's label."""
    counts = ctx.store(COUNTS)
    n = (counts.get(key) or 0) + 1
    counts.put(key, n)
    ctx.forward(key, {"n": n, "label": ctx.store(LABELS).get(key)})


def build_topology() -> BuiltTopology:
    return (
        Topology()
        .add_source(EVENTS, EVENTS, key_serde=STR, value_serde=JSON)
        .add_table(LABELS, LABELS, key_serde=STR, value_serde=JSON)
        .add_store(COUNTS, key_serde=STR, value_serde=JSON)
        .add_processor("count", count_events, parents=[EVENTS], stores=[COUNTS, LABELS])
        .add_sink(OUT, OUT, parents=["count"], key_serde=STR, value_serde=JSON)
        .build()
    )


def assignment(*task_ids: TaskId, generation: int = 1) -> Assignment:
    return Assignment(frozenset(task_ids), frozenset(), frozenset(), {}, {}, generation=generation)


def encode(value: Any) -> bytes:
    data = JSON.serialize(value)
    assert data is not None
    return data


@pytest.fixture(scope="session")
def env() -> RocksDBEnv:
    return RocksDBEnv(16 * MiB)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()  # a fresh registry per test


@pytest.fixture
def idle_ms() -> int:
    """``max.task.idle.ms``: -1 (parametrize ``idle_ms``) for a test that hands the router
    batches of its own, which no fetch ends; the harness's consumer reports them."""
    return 0


@pytest.fixture
def buffered_records() -> int:
    """``buffered.records.per.partition`` (parametrize ``buffered_records``)."""
    return 1000


@pytest.fixture
def settings(idle_ms: int, buffered_records: int) -> Settings:
    return Settings.model_validate(
        {
            "application.id": APP,
            "statestore.checkpoint.interval.ms": int(CHECKPOINT_INTERVAL_S * 1000),
            "max.task.idle.ms": idle_ms,
            "buffered.records.per.partition": buffered_records,
        }
    )


@pytest.fixture
def state_dir(tmp_path: Path, clock: FakeClock) -> Iterator[StateDirectory]:
    directory = StateDirectory(tmp_path / "state", APP, clock)
    directory.open()
    yield directory
    directory.close()


@pytest.fixture
def collector() -> FakeCollector:
    return FakeCollector()


@pytest.fixture
def ctx(
    settings: Settings,
    state_dir: StateDirectory,
    env: RocksDBEnv,
    collector: FakeCollector,
    metrics: Metrics,
    clock: FakeClock,
) -> TaskContext:
    return TaskContext(settings, state_dir, env, collector, metrics, clock)  # type: ignore[arg-type]


@pytest.fixture
def topology() -> BuiltTopology:
    return build_topology()


@dataclass
class Harness:
    """The task parts and their fakes, with the steps a processing loop would take."""

    parts: TaskParts
    ctx: TaskContext
    collector: FakeCollector
    group_offsets: FakeGroupOffsets
    consumer: FakeDataConsumer
    restore_consumer: FakeRestoreConsumer
    clock: FakeClock
    metrics: Metrics
    state_dir: StateDirectory
    _replicated: int = 0

    @property
    def manager(self) -> TaskManager:
        return self.parts.manager

    @property
    def tasks(self) -> Tasks:
        return self.parts.tasks

    @property
    def router(self) -> RecordRouter:
        return self.parts.router

    @property
    def commits(self) -> TaskCommitter:
        return self.parts.committer

    def assign(self, *task_ids: TaskId) -> None:
        self.manager.on_assigned(assignment(*task_ids))

    def restore(self, max_steps: int = 50) -> None:
        """Step the changelog reader until no task is restoring."""
        for _ in range(max_steps):
            if not self.tasks.restoring():
                return
            self.tasks.restore_step(timeout=0.0)
        raise AssertionError("restore did not finish")

    def event(self, task_id: TaskId, key: str, value: Any = None) -> int:
        """Append an ``events`` record to the task's partition; return its offset."""
        return self.consumer.append(EVENTS, task_id.partition, key.encode(), encode(value or {}))

    def process(self) -> int:
        """Process everything the data consumer has for the assigned partitions."""
        return self.router.process(self.consumer.consume(10_000, 0.0))

    def replicate_changelogs(self) -> None:
        """Make every acknowledged changelog record readable by the restore consumer.

        The fakes are separate objects; this plays the broker's part, keeping offsets equal.
        """
        for record in self.collector.changelog[self._replicated :]:
            assert record.partition is not None
            offset = self.restore_consumer.append(
                record.topic, record.partition, record.key, record.value, record.headers
            )
            assert offset == record.offset
        self._replicated = len(self.collector.changelog)

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def make_harness(
    topology: BuiltTopology, ctx: TaskContext, protocol: CommitProtocol | None = None
) -> Harness:
    """The task parts over ``ctx`` (whose collector is a FakeCollector) and fresh Kafka fakes.

    For tests that cannot use the ``harness`` fixture (hypothesis tests build one per
    test run); call ``harness.manager.close_all(clean=False)`` at the end.
    """
    group_offsets = FakeGroupOffsets()
    consumer = FakeDataConsumer()
    restore_consumer = FakeRestoreConsumer()
    reader = ChangelogReader(restore_consumer, ctx.metrics, batch_records=1000)  # type: ignore[arg-type]
    parts = build_task_parts(
        topology,
        ctx,
        reader,
        consumer,  # type: ignore[arg-type]
        group_offsets,  # type: ignore[arg-type]
        protocol or AtLeastOnceCommit(ctx.collector, group_offsets, ctx.settings.commit_timeout_s),
        # The ends the fake broker holds, as the fetch path would report them.
        high_watermarks=lambda tps: {tp: restore_consumer.end_offset(tp) for tp in tps},
    )
    return Harness(
        parts,
        ctx,
        ctx.collector,  # type: ignore[arg-type]
        group_offsets,
        consumer,
        restore_consumer,
        ctx.clock,  # type: ignore[arg-type]
        ctx.metrics,
        ctx.state_dir,
    )


@pytest.fixture
def harness(topology: BuiltTopology, ctx: TaskContext) -> Iterator[Harness]:
    made = make_harness(topology, ctx)
    yield made
    made.manager.close_all(clean=False)
