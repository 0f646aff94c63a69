"""``TopologyTestDriver``: a topology run in-process, with no broker and no threads.

It runs the worker's own parts (reference dsl-and-joins.md §4): one real
:class:`~worker.tasks.task.Task` per sub-topology and partition, with its RocksDB stores
in a temporary state directory, its task graph, processor context and punctuators; only
Kafka's I/O is replaced (:mod:`worker.testing.logs`). Each record piped in is processed
to the end before ``pipe`` returns: what it writes to a topic the topology reads (a
repartition topic) is processed next, in the order written, then every task commits
through the same steps as the worker's commit (changelogs, store batch, source
offsets) and the punctuators that are due run. So results are deterministic, and they
are the worker's: a test here and a worker on a broker agree (tests/integration/
test_dsl_parity.py runs the same topologies both ways).

With ``partitions`` > 1 every topic has that many partitions, and records are spread by
murmur2 of their key bytes as the worker's producer spreads them: a topology that forgot
a repartition shows it here (the lesson of KIP-1238).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.config import Settings
from worker.dsl.builder import StreamsBuilder
from worker.errors import TopologyError
from worker.observability import Metrics
from worker.processing.topology import BuiltTopology, Topology
from worker.serde import Serde
from worker.state.directory import StateDirectory
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store
from worker.tasks.failures import RunFailed
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext
from worker.testing.logs import Headers, LogCollector, LogRecord, TopicLogs
from worker.testing.stores import DriverStore
from worker.testing.topics import TestInputTopic, TestOutputTopic

DEFAULT_APPLICATION_ID = "test-driver-app"
_MEMORY = 16 * 1024 * 1024


class TopologyTestDriver:
    """Runs ``topology`` (a Topology or a StreamsBuilder, built with the config's
    ``application.id``, ``test-driver-app`` by default) on settings ``config`` (the
    worker's keys). Wall time starts at ``wall_clock_ms``. Close it (or use ``with``).

    ``timestamp.max.future.ms`` is off (-1) unless ``config`` sets it: the driver's wall
    clock is its own (0 by default), and records stamped with real event times would
    all be "from the future" against it. Set it with ``wall_clock_ms`` to test the bound."""

    def __init__(
        self,
        topology: Topology | StreamsBuilder,
        config: Mapping[str, Any] | None = None,
        *,
        partitions: int = 1,
        wall_clock_ms: int = 0,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        values = {
            "application.id": DEFAULT_APPLICATION_ID,
            "timestamp.max.future.ms": -1,
            **(config or {}),
        }
        self.settings = Settings.model_validate(values)
        app = self.settings.application_id
        if isinstance(topology, StreamsBuilder):
            topology = topology.build(app)
        built_for = getattr(topology, "application_id", None)
        if built_for is not None and built_for != app:
            raise TopologyError(
                f"the topology was built for application id {built_for!r}, the driver runs {app!r}"
            )
        self.topology: BuiltTopology = topology.build()
        self.partitions = partitions
        self._clock = FakeClock(now=wall_clock_ms / 1000.0)
        self._dir = Path(tempfile.mkdtemp(prefix="worker-test-driver-"))
        self._state_dir = StateDirectory(self._dir, app, self._clock)
        self._state_dir.open()
        self._logs = TopicLogs(lambda topic: partitions)
        self._queue: deque[LogRecord] = deque()
        self._logs.on_append = self._queue.append
        self._logs.watched = {t for st in self.topology.subtopologies for t in st.source_topics}
        env = RocksDBEnv(_MEMORY)
        # Global tables: one store each, written as each record is piped (no task reads
        # their topics: every task reads the whole table).
        self._globals = {
            spec.source_topic: Store.open(self._dir / "global" / spec.name, env, spec.name)
            for spec in self.topology.global_tables
        }
        self._global_specs = {spec.source_topic: spec for spec in self.topology.global_tables}
        self._ctx = TaskContext(
            self.settings,
            self._state_dir,
            env,
            LogCollector(self._logs),  # type: ignore[arg-type]
            Metrics(),
            self._clock,
            global_stores={
                s.name: self._globals[s.source_topic] for s in self._global_specs.values()
            },
        )
        self._tasks: dict[tuple[str, int], Task] = {}
        self._all: list[Task] = []
        try:
            for st in self.topology.subtopologies:
                for partition in range(partitions):
                    task = self._start(
                        Task(TaskId(st.id, partition), TaskRole.ACTIVE, st, self._ctx)
                    )
                    for topic in st.source_topics:
                        self._tasks[(topic, partition)] = task
        except BaseException:
            self.close()
            raise

    def _start(self, task: Task) -> Task:
        task.open()
        self._all.append(task)
        task.transition(TaskState.RESTORING)
        task.transition(TaskState.RUNNING)
        if task.punctuators is not None:
            task.punctuators.start(task.stream_time)
        return task

    # -- topics ----------------------------------------------------------------------

    def input_topic(
        self, name: str, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> TestInputTopic:
        """A topic the topology reads; serdes default to its source's."""
        source = self._source(name)
        return TestInputTopic(
            name,
            key_serde or source.key_serde,
            value_serde or source.value_serde,
            self._pipe,
            self._wall_ms,
        )

    def output_topic(
        self, name: str, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> TestOutputTopic:
        """A topic the topology writes; serdes default to its (first) sink's."""
        sinks = [s for st in self.topology.subtopologies for s in st.sinks if s.topic == name]
        if not sinks and (key_serde is None or value_serde is None):
            raise TopologyError(f"no sink writes {name!r}: give its serdes")
        keys = key_serde or sinks[0].key_serde
        values = value_serde or sinks[0].value_serde
        return TestOutputTopic(name, keys, values, self._logs.by_topic.setdefault(name, []))

    def store(self, name: str) -> DriverStore:
        """Store ``name`` across every partition's task, read as the HTTP query API
        reads: what was committed (after each record, everything processed)."""
        st, spec = self.topology.store(name)
        tasks = [t for t in self._all if t.subtopology.id == st.id]
        return DriverStore(spec, [t.stores[name] for t in tasks], [_context(t) for t in tasks])

    # -- time ------------------------------------------------------------------------

    def advance_wall_clock(self, ms: int) -> None:
        """Move the wall clock by ``ms`` and run the wall-clock punctuators now due."""
        if ms < 0:
            raise ValueError(f"the wall clock only moves forward, got {ms} ms")
        self._clock.advance(ms / 1000.0)
        self._punctuate_and_commit()
        self._drain()

    def _wall_ms(self) -> int:
        return int(self._clock.now * 1000)

    # -- processing ------------------------------------------------------------------

    def _source(self, topic: str) -> Any:
        if topic in self._global_specs:
            return self._global_specs[topic]
        for st in self.topology.subtopologies:
            for source in st.sources:
                if source.topic == topic:
                    return source
        raise TopologyError(f"no source reads {topic!r}")

    def _pipe(
        self, topic: str, key: bytes | None, value: bytes | None, ts: int, headers: Headers
    ) -> None:
        self._source(topic)
        store = self._globals.get(topic)
        if store is not None:  # a global table: applied at once, like the worker's update
            if key is not None:
                batch = store.restore_batch()
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
                offset = store.committed_offsets().get((topic, 0), -1) + 1
                store.write_restored(batch, {(topic, 0): offset})
            return
        self._logs.append(topic, key, value, ts, headers)
        self._drain()

    def _drain(self) -> None:
        """Process queued records in the order they were written, each followed by a
        commit of every task and the punctuators due (which may queue more)."""
        while self._queue:
            self._process(self._queue.popleft())

    def _process(self, record: LogRecord) -> None:
        """One record through its task, then a commit of every task and the punctuators due."""
        task = self._tasks[(record.topic(), record.partition())]
        try:
            task.process_run([record], 0)
        except RunFailed as exc:
            raise exc.__cause__ or exc from None
        self._punctuate_and_commit()

    def _punctuate_and_commit(self) -> None:
        for task in self._all:
            if task.punctuators is not None:
                task.punctuators.punctuate(task.stream_time)
        for task in self._all:
            if task.needs_commit():
                task.produce_changelogs()
                task.commit_stores(self._ctx.collector.acked)
                task.mark_sources_committed(task.source_offsets_to_commit())

    def close(self) -> None:
        """Close every task and remove the state directory. Idempotent."""
        tasks, self._all = self._all, []
        try:
            for task in tasks:
                task.close(clean=True)
            for store in getattr(self, "_globals", {}).values():
                store.close()
        finally:
            self._state_dir.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _context(task: Task) -> Any:
    return task._graph.context  # type: ignore[union-attr]
