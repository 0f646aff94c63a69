"""Step 0 of the commit: TTL stores swept, counted; other stores untouched."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from worker.observability import Metrics
from worker.state import ttl
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.ttl_store import open_store
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
