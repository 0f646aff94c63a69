"""Step 0 of an active task's commit: each store with a TTL deletes what has expired.

Runs before the changelogs are produced (step 1), so the sweep's deletes go out as
changelog tombstones in the same commit, and under exactly-once in the same transaction,
as the records that made the keys expire. Each sweep is bounded (``ttl.sweep_budget``):
a commit never stops the world to expire a backlog; what is left waits for the next
commit and shows in ``worker_ttl_sweep_backlog``. Stores without a TTL are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping

from worker.observability import Metrics
from worker.state.store import Store
from worker.state.ttl_store import TtlStore

BACKLOG_CAP = 100_000  # the backlog gauge counts due entries up to this many


def sweep_expired(task: str, stores: Mapping[str, Store], now_ms: int, metrics: Metrics) -> int:
    """Sweep every TTL store of task ``task`` at stream time ``now_ms``; the keys evicted."""
    evicted = 0
    for name, store in stores.items():
        if not isinstance(store, TtlStore):
            continue
        swept = store.sweep(now_ms)
        if swept.evicted:
            metrics.ttl_evictions.labels(task=task, store=name).inc(swept.evicted)
            evicted += swept.evicted
        backlog = store.backlog(now_ms, BACKLOG_CAP) if swept.more else 0
        metrics.ttl_sweep_backlog.labels(task=task, store=name).set(backlog)
    return evicted
