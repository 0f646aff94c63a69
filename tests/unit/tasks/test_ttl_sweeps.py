"""Step 0 of the commit: TTL stores swept, counted; versioned stores' history swept a
slice of keys per commit, counted; other stores untouched."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from worker.observability import Metrics
from worker.state import ttl
from worker.state import versioned_format as fmt
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.ttl_store import open_store
from worker.state.versioned_store import VersionedStore
from worker.tasks.ttl_sweeps import sweep_expired


def test_ttl_stores_are_swept_and_counted_and_others_left_alone(tmp_path: Path) -> None:
    env = RocksDBEnv(4 * MiB)
    timed = open_store(tmp_path / "t", env, "t", 10)
    plain = open_store(tmp_path / "p", env, "p")
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    try:
        for n in range(ttl.MIN_SWEEP_BUDGET + 5):
            timed.put_at(b"%06d" % n, b"v", write_ms=0)  # type: ignore[attr-defined]
        plain.put(b"k", b"v")
        timed.commit({})
        timed.sweep(now_ms=0)  # resets the budget to its minimum

        evicted = sweep_expired("0_1", {"t": timed, "p": plain}, 100, metrics)

        labels = {"task": "0_1", "store": "t"}
        assert evicted == ttl.MIN_SWEEP_BUDGET
        assert registry.get_sample_value("worker_ttl_evictions_total", labels) == evicted
        assert registry.get_sample_value("worker_ttl_sweep_backlog", labels) == 5
        assert dict(plain.pending()) == {b"k": b"v"}
    finally:
        timed.close()
        plain.close()


def test_a_versioned_store_loses_versions_of_keys_never_written_again(tmp_path: Path) -> None:
    """Keys written twice, then never again: once a later write of another key moves
    the cutoff past their second version, commits' sweeps delete their first, a slice of
    keys per commit, and the deletes go to the changelog (the pending writes)."""
    env = RocksDBEnv(4 * MiB)
    store = VersionedStore.open_versioned(tmp_path / "v", env, "v", 100)
    store.sweep_min_keys = 3
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    try:
        keys = [b"k%d" % n for n in range(7)]
        for ts in (0, 10):
            for key in keys:
                store.put_version(key, b"v%d" % ts, ts)
        sweep_expired("0_1", {"v": store}, 10, metrics)  # nothing out of history yet
        assert not [v for v in store.pending().values() if v is None]
        store.commit({})
        store.put_version(b"z", b"later", 200)  # cutoff 100: every k's version at 0 is out
        store.commit({})

        deleted = []
        for _ in range(3):  # 8 keys, 3 per commit
            sweep_expired("0_1", {"v": store}, 200, metrics)
            deleted.append([k for k, v in store.pending().items() if v is None])
            store.commit({})

        assert [len(d) for d in deleted] == [3, 3, 1]  # k0-k2, k3-k5, k6 (z has no history)
        assert sorted(sum(deleted, [])) == sorted(fmt.history_key(key, 0) for key in keys)
        labels = {"task": "0_1", "store": "v"}
        assert registry.get_sample_value("worker_versioned_pruned_total", labels) == len(keys)
        for key in keys:
            assert store.get_as_of(key, 100) == store.get_latest(key)
    finally:
        store.close()
