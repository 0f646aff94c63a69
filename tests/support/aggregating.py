"""A task's graph, stores and punctuators without the task: records fed one by one, the
task's stream-time punctuators run after each (as the task runs them after a batch),
outputs decoded, commits and reopenings (a restart) by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from tests.fakes import FakeCollector
from tests.support.feeding import feed
from worker.clock import FakeClock
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.processing.graph import TaskGraph
from worker.processing.punctuators import Punctuation, TaskPunctuators
from worker.processing.topology import Topology
from worker.processing.windows import SessionWindows, Windows
from worker.serde import JSON, STR, Serde
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store
from worker.tasks.stores import open_store
from worker.windowed_serde import WindowedSerde

WINDOWED_STR = WindowedSerde(STR)


@dataclass(frozen=True)
class Output:
    topic: str
    key: Any
    value: Any
    timestamp: int
    headers: Any


class _NoFailures:
    def skip_punctuation(self, punctuation: Punctuation) -> bool:
        return False

    def punctuation_succeeded(self, punctuation: Punctuation) -> None:
        return None


class Running:
    """``built``'s first sub-topology as task ``0_0`` over real stores under ``root``.

    ``key_serde``/``value_serde`` decode what the sinks sent (windowed keys over
    ``key_serde``); records are fed as JSON values with string keys.
    """

    def __init__(
        self,
        built: BuiltTopology,
        root: Path,
        key_serde: Serde = WINDOWED_STR,
        value_serde: Serde = JSON,
    ) -> None:
        self.subtopology = built.subtopologies[0]
        self.metrics = Metrics(CollectorRegistry())
        self._env = RocksDBEnv(16 * MiB)
        self.stores: dict[str, Store] = {
            spec.name: open_store(spec, root / spec.name, self._env, "0_0", self.metrics)  # type: ignore[arg-type]
            for spec in self.subtopology.stores
        }
        self.collector = FakeCollector()
        self.graph = TaskGraph(self.subtopology, "0_0", self.stores, self.collector)
        stream_time = max((s.committed_stream_time for s in self.stores.values()), default=-1)
        self.graph.context.stream_time = stream_time
        self.punctuators = TaskPunctuators(
            self.graph.context,
            self.subtopology.processors,
            FakeClock(),
            self.metrics,
            _NoFailures(),
        )
        self.punctuators.start(stream_time)
        self._keys, self._values = key_serde, value_serde
        self._offset = 0

    def feed(self, key: str | None, value: Any, ts: int, headers: Any = None) -> None:
        topic = self.subtopology.source_topics[0]
        key_bytes = None if key is None else key.encode()
        feed(self.graph, topic, 0, self._offset, ts, key_bytes, JSON.serialize(value), headers)
        self._offset += 1
        self.punctuators.punctuate(self.graph.context.stream_time)

    def feed_all(self, records: list[tuple[str, Any, int]]) -> None:
        for key, value, ts in records:
            self.feed(key, value, ts)

    def outputs(self, topic: str | None = None) -> list[Output]:
        return [
            Output(
                r.topic,
                self._keys.deserialize(r.key),
                self._values.deserialize(r.value),
                r.timestamp,
                r.headers,
            )
            for r in self.collector.sent
            if topic is None or r.topic == topic
        ]

    def commit(self) -> None:
        for store in self.stores.values():
            store.commit({}, self.graph.context.stream_time)

    def late_records(self, processor: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "worker_late_records_total", {"task": "0_0", "processor": processor}
        )
        return value or 0.0

    def close(self) -> None:
        self.punctuators.stop()
        for store in self.stores.values():
            store.close()


def listing(windows: Windows, emit: str) -> BuiltTopology:
    """An aggregation ``agg`` over ``windows`` whose aggregates are the sorted lists of
    the timestamps of the window's records (the reference models' aggregates,
    tests/support/window_models.py), feeding a sink ``out``."""
    merger = (lambda key, a, b: sorted(a + b)) if isinstance(windows, SessionWindows) else None
    return (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_windowed_aggregation(
            "agg",
            ["in"],
            windows,
            initializer=list,
            aggregator=lambda key, ts, seen: sorted([*seen, ts]),
            merger=merger,
            emit=emit,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_sink("out", "out", ["agg"], WindowedSerde(STR), JSON)
        .build()
    )
