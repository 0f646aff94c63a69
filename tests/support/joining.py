"""A join's task graph over real stores, without the task: records fed to any source
topic one by one, outputs decoded, commits, restarts (stores closed and reopened from
disk) and restores (fresh stores rebuilt from what the commits sent to the changelogs)
by hand. Keys are strings, values JSON."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from tests.fakes import FakeCollector
from tests.support.feeding import feed
from tests.support.restoring import restore_pairs
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.processing.graph import TaskGraph
from worker.serde import JSON
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store
from worker.tasks.stores import open_store

Output = tuple[Any, Any, int]  # key, value, timestamp
Fed = tuple[str, str | None, Any, int]  # topic, key, value, timestamp


@contextmanager
def joining(built: BuiltTopology) -> Iterator[Joining]:
    """``Joining`` over a directory of its own, its stores closed and the directory
    removed however the test ends (hypothesis runs one per example)."""
    with tempfile.TemporaryDirectory() as tmp:
        running = Joining(built, Path(tmp))
        try:
            yield running
        finally:
            running.close()


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
        # what each commit sent to each store's changelog (a table's: its topic's records)
        self.changelogs: dict[str, list[tuple[bytes, bytes | None]]] = {
            spec.name: [] for spec in self.subtopology.stores
        }
        self._generation = 0
        self._open()

    def _open(self) -> None:
        where = self._root / str(self._generation)
        self.stores = {
            spec.name: open_store(spec, where / spec.name, self._env, "0_0", self._metrics)  # type: ignore[arg-type]
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

    def play(self, script: Iterable[Sequence[Any]], fed: Callable[[Sequence[Any]], Fed]) -> None:
        """A property test's script in order: a ``("restart",)`` or ``("restore",)`` event
        does that to the stores; ``fed`` turns any other event into the record to feed
        (and is where the test tells its reference about it)."""
        for event in script:
            if event[0] == "restart":
                self.restart()
            elif event[0] == "restore":
                self.restore()
            else:
                self.feed(*fed(event))

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
        for name, store in self.stores.items():
            log = self.changelogs[name]
            log.extend(store.pending().items())
            store.commit({(name, 0): max(len(log) - 1, 0)}, self.graph.context.stream_time)

    def restart(self) -> None:
        """A clean restart: commit, close every store, reopen them from disk."""
        self.commit()
        self.close()
        self._open()

    def restore(self, batch: int = 7) -> None:
        """A move to a fresh instance: commit, close, then new stores in a new directory
        rebuilt from the changelogs in batches of ``batch`` records."""
        self.commit()
        self.close()
        self._generation += 1
        self._open()
        for name, store in self.stores.items():
            log = self.changelogs[name]
            for offset in range(0, len(log), batch):
                chunk = log[offset : offset + batch]
                restore_pairs(store, chunk, {(name, 0): offset + len(chunk) - 1})
        self.graph.context.stream_time = max(
            (s.committed_stream_time for s in self.stores.values()), default=-1
        )

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
