"""Global tables: every partition of a topic in one store on every instance.

A global table (``Topology.add_global_table``) is a store that holds the whole topic,
not one task's partition of it: every worker keeps a full copy, so a processor may look
up any key (a stream-global join's ``key_mapper``) with no co-partitioning and no
repartition. As in Kafka Streams, the topic is the table's only changelog, and records
are applied as they are (no processors run on them).

Protocol, on the processing thread (the loop owns it; no thread of its own):

1. :meth:`GlobalTables.open`: each store opened under ``<state>/<app>/global/<name>``;
   its committed offsets (kept inside the store, written with its data) say where each
   partition resumes, so a restart reads only the tail.
2. :meth:`GlobalTables.bootstrap`, before the worker joins the group: read every
   partition until it reports its end (partition EOF), batch by batch, each batch
   written with its offsets in one atomic RocksDB write. No task processes before every
   global table is current as of start-up (Kafka Streams' global thread latch).
3. :meth:`GlobalTables.update`, once per loop iteration between batches: one fetch
   without waiting, applied the same way, so the tables stay current while tasks run.
4. :meth:`GlobalTables.close`: the stores closed; their offsets are already in them.

Processors read global stores through read-only views, never write them. Lookups see
what was applied at the last update: the join is not temporal (Kafka Streams' is not
either).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from worker.errors import TopologyError
from worker.observability import get_logger
from worker.processing.built_topology import StoreSpec
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import RestoreBatch, Store

TP = tuple[str, int]
GLOBAL_DIR = "global"
UPDATE_BATCH = 2000

_log = get_logger(component="global_tables")


class Fetched(Protocol):
    """One fetch (``kafka.consumers.FetchedBatch``): messages, and partitions at EOF."""

    messages: list[Any]
    end_offsets: dict[TP, int]


class GlobalConsumer(Protocol):
    """A group-less consumer by explicit positions (``kafka.consumers.RestoreConsumer``)."""

    def add(self, positions: Mapping[TP, int | None]) -> None: ...

    def fetch(self, max_records: int, timeout: float) -> Fetched: ...

    def close(self) -> None: ...


class GlobalTables:
    """The global tables of one worker (see the module doc). Processing thread only."""

    def __init__(
        self,
        specs: Iterable[StoreSpec],
        partitions: Mapping[str, int],
        root: Path,
        env: RocksDBEnv,
        consumer: GlobalConsumer,
    ) -> None:
        """``partitions``: each global topic's partition count; ``root``: the
        application's state directory."""
        self._specs = {spec.name: spec for spec in specs}
        self._topics = {spec.changelog(""): spec.name for spec in self._specs.values()}
        self._partitions = dict(partitions)
        self._root = root / GLOBAL_DIR
        self._env = env
        self._consumer = consumer
        self.stores: dict[str, Store] = {}

    def open(self) -> None:
        """Open every store and start reading each partition after its stored offset.

        Raises: as :meth:`Store.open` (a store already opened stays in ``stores`` for
        :meth:`close`).
        """
        positions: dict[TP, int | None] = {}
        for name in self._specs:
            store = Store.open(self._root / name, self._env, name)
            self.stores[name] = store
            stored = store.committed_offsets()
            topic = self._specs[name].changelog("")
            for partition in range(self._partitions[topic]):
                offset = stored.get((topic, partition))
                positions[(topic, partition)] = None if offset is None else offset + 1
        self._consumer.add(positions)

    def bootstrap(self, stop: threading.Event, batch: int = UPDATE_BATCH) -> bool:
        """Read every partition to the end it reports; False when stopped first."""
        waiting = {(topic, p) for topic in self._topics for p in range(self._partitions[topic])}
        applied = 0
        while waiting and not stop.is_set():
            fetched = self._consumer.fetch(batch, 0.2)
            applied += self._apply(fetched.messages)
            waiting.difference_update(fetched.end_offsets)
        _log.info("global_tables.bootstrapped", records=applied, stopped=bool(waiting))
        return not waiting

    def update(self, batch: int = UPDATE_BATCH) -> int:
        """Apply what one fetch without waiting returns; the records applied."""
        return self._apply(self._consumer.fetch(batch, 0.0).messages)

    def _apply(self, messages: list[Any]) -> int:
        """Each store's records of ``messages`` and their offsets, one atomic write per
        store. A null key addresses no row: skipped, its offset still counts."""
        batches: dict[str, RestoreBatch] = {}
        offsets: dict[str, dict[TP, int]] = {}
        for msg in messages:
            topic = msg.topic()
            name = self._topics[topic]
            offsets.setdefault(name, {})[(topic, msg.partition())] = msg.offset()
            key = msg.key()
            if key is None:
                continue
            records = batches.get(name)
            if records is None:
                records = batches[name] = self.stores[name].restore_batch()
            value = msg.value()
            if value is None:
                records.delete(key)
            else:
                records.put(key, value)
        for name, moved in offsets.items():
            store = self.stores[name]
            store.write_restored(batches.get(name) or store.restore_batch(), moved)
        return len(messages)

    def close(self) -> None:
        """Close every store, keeping the first error. Idempotent."""
        first: BaseException | None = None
        for store in self.stores.values():
            try:
                store.close()
            except BaseException as exc:  # noqa: BLE001 - kept, raised after the rest close
                first = first or exc
        if first is not None:
            raise first


def partitions_of(specs: Iterable[StoreSpec], counts: Mapping[str, int]) -> dict[str, int]:
    """Each global table's topic and its partition count, from ``counts`` (the admin's
    look at the broker).

    Raises:
        TopologyError: a global table's topic does not exist (exit 1, as for sources).
    """
    topics = [spec.changelog("") for spec in specs]
    missing = sorted(t for t in topics if t not in counts)
    if missing:
        raise TopologyError(
            f"global table topics do not exist: {', '.join(missing)} (create them first)"
        )
    return {topic: counts[topic] for topic in topics}
