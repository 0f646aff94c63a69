"""A join's task graph over real stores, without the task: records fed to any source
topic one by one, outputs decoded, commits and restarts (stores closed and reopened
from disk) by hand. Keys are strings, values JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from tests.fakes import FakeCollector
from tests.support.feeding import feed
from worker.observability import Metrics
from worker.processing.graph import TaskGraph
from worker.processing.topology import BuiltTopology
from worker.serde import JSON
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store
from worker.tasks.stores import open_store

Output = tuple[Any, Any, int]  # key, value, timestamp


class Joining:
    """``built``'s only sub-topology as task ``0_0`` over real stores under ``root``."""

    def __init__(self, built: BuiltTopology, root: Path) -> None:
        assert len(built.subtopologies) == 1, built.subtopologies
        self.subtopology = built.subtopologies[0]
        self._root = root
        self._env = RocksDBEnv(16 * MiB)
        self._metrics = Metrics(CollectorRegistry())
        self.collector = FakeCollector()
        self._offsets: dict[str, int] = {}
        self.stores: dict[str, Store] = {}
        self._open()

    def _open(self) -> None:
        self.stores = {
            spec.name: open_store(spec, self._root / spec.name, self._env, "0_0", self._metrics)  # type: ignore[arg-type]
            for spec in self.subtopology.stores
        }
        self.graph = TaskGraph(self.subtopology, "0_0", self.stores, self.collector)
        stream_time = max((s.committed_stream_time for s in self.stores.values()), default=-1)
        self.graph.context.stream_time = stream_time

    def feed(self, topic: str, key: str | None, value: Any, ts: int) -> None:
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1
        key_bytes = None if key is None else key.encode()
        value_bytes = None if value is None else JSON.serialize(value)
        feed(self.graph, topic, 0, offset, ts, key_bytes, value_bytes)

    def outputs(self, topic: str) -> list[Output]:
        return [
            (
                None if r.key is None else r.key.decode(),
                None if r.value is None else JSON.deserialize(r.value),
                r.timestamp,
            )
            for r in self.collector.sent
            if r.topic == topic
        ]

    def late_records(self, processor: str) -> float:
        """``worker_late_records_total`` of ``processor`` (a windowed store's name)."""
        value = self._metrics.registry.get_sample_value(
            "worker_late_records_total", {"task": "0_0", "processor": processor}
        )
        return value or 0.0

    def commit(self) -> None:
        for store in self.stores.values():
            store.commit({}, self.graph.context.stream_time)

    def restart(self) -> None:
        """A clean restart: commit, close every store, reopen them from disk."""
        self.commit()
        self.close()
        self._open()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
