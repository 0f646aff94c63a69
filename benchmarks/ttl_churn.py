"""A TTL store under a churn of distinct keys, observed from outside the worker.

Shared by the ``scans_ttl`` benchmark (1M keys) and the integration test
(``tests/integration/test_ttl_store.py``, scaled down): ``benchmarks.apps:ttl_app`` keeps
every key for ``TTL_MS`` of stream time; the input gives record ``i`` a distinct key and
the timestamp ``T0 + i * step_ms``, so about ``TTL_MS / step_ms`` keys are alive at any
stream time, however many went through. What is measured:

- the changelog's live keys: the changelog read from its start, each tombstone removing
  its key (what a compacted changelog holds once compacted, and what a restore rebuilds;
  the test broker does not compact, so the raw record count is given too);
- the RocksDB store directories: bytes on disk, and, once the worker stopped, the
  entries in them (user keys and expiry index entries).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.apps import TTL_STORE
from benchmarks.harness import BenchmarkFailed
from benchmarks.kafka_io import bulk_producer, read_topic
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

T0 = 1_700_000_000_000  # the first record's timestamp, ms


def changelog_topic(application_id: str) -> str:
    return f"{application_id}-{TTL_STORE}-changelog"


def produce_churn(bootstrap: str, topic: str, first: int, count: int, step_ms: int) -> int:
    """Records ``first .. first + count - 1``: key ``i`` (8 bytes big-endian), a 32-byte
    value, timestamp ``T0 + i * step_ms``. Returns the count acknowledged."""
    producer = bulk_producer(bootstrap)
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    value = b"v" * 32
    for i in range(first, first + count):
        while True:
            try:
                producer.produce(
                    topic, value, i.to_bytes(8, "big"), timestamp=T0 + i * step_ms,
                    on_delivery=on_delivery,
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120) or failed:
        raise BenchmarkFailed(f"{topic}: records unacknowledged or failed {failed[:1]}")
    return count


class ChangelogTail:
    """A changelog read incrementally: each :meth:`read` goes on from where the last one
    stopped, applying tombstones (see the module doc)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._next: dict[int, int] = {}
        self._live: set[tuple[int, bytes]] = set()
        self.records = 0  # every record read, tombstones included

    @property
    def live(self) -> int:
        """Keys left after applying the tombstones (a compacted changelog's keys)."""
        return len(self._live)

    def read(self) -> None:
        """Read to the end of every partition."""
        read_topic(self._bootstrap, self._topic, self._visit, dict(self._next), timeout=600)

    def _visit(self, msg: Any) -> None:
        self.records += 1
        self._next[msg.partition()] = msg.offset() + 1
        key = (msg.partition(), msg.key())
        if msg.value() is None:
            self._live.discard(key)
        else:
            self._live.add(key)


def store_dirs(state_dir: Path) -> list[Path]:
    """The ``recent`` store directory of every task under a worker's state dir."""
    return sorted(p for p in state_dir.rglob(TTL_STORE) if p.parent.name == "rocksdb")


def disk_bytes(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in p.rglob("*") if f.is_file())


def stored_entries(paths: list[Path]) -> int:
    """Entries (user keys and index entries) in the stores; the worker must have stopped."""
    env = RocksDBEnv(64 * MiB)
    total = 0
    for path in paths:
        store = Store.open(path, env, TTL_STORE)
        try:
            total += sum(1 for _ in _entries(store))
        finally:
            store.close()
    return total


def _entries(store: Store) -> Iterator[tuple[bytes, bytes]]:
    with store.scan() as found:
        yield from found
