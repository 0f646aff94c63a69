"""Step 0 of an active task's commit: each store with a TTL deletes what has expired, and
each versioned store the versions its history no longer reaches.

Runs before the changelogs are produced (step 1), so the sweep's deletes go out as
changelog tombstones in the same commit, and under exactly-once in the same transaction,
as the records that made the keys expire. Each sweep is bounded (``ttl.sweep_budget``):
a commit never stops the world to expire a backlog; what is left waits for the next
commit and shows in ``worker_ttl_sweep_backlog``; a versioned store sweeps a slice of its
keys per commit (``VersionedStore.sweep_history``). Other stores are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping

from worker.observability import Metrics
from worker.state.store import Store
from worker.state.ttl_store import TtlStore
from worker.state.versioned_store import VersionedStore

BACKLOG_CAP = 100_000  # the backlog gauge counts due entries up to this many


def sweep_expired(task: str, stores: Mapping[str, Store], now_ms: int, metrics: Metrics) -> int:
    """Sweep every TTL store of task ``task`` at stream time ``now_ms`` and every
    versioned store's history; the keys evicted (by TTL)."""
    evicted = 0
    for name, store in stores.items():
        if isinstance(store, VersionedStore):
            pruned = store.sweep_history().deleted
            if pruned:
                metrics.versions_pruned.labels(task=task, store=name).inc(pruned)
            continue
        if not isinstance(store, TtlStore):
            continue
        swept = store.sweep(now_ms)
        if swept.evicted:
            metrics.ttl_evictions.labels(task=task, store=name).inc(swept.evicted)
            evicted += swept.evicted
        backlog = store.backlog(now_ms, BACKLOG_CAP) if swept.more else 0
        metrics.ttl_sweep_backlog.labels(task=task, store=name).set(backlog)
    return evicted
