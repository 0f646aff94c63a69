"""A task's ``.checkpoint`` file kept in step with its stores' own offsets.

The stores hold their committed changelog offsets inside RocksDB; ``.checkpoint`` is what
the process reports for task directories it has not opened, and what an old version left
behind before offsets moved into the stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from worker.assignment.task_id import TP
from worker.state.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from worker.state.store import Store


def migrate_checkpoint(
    path: Path, stores: Mapping[str, Store], changelogs: Mapping[str, TP], log: Any
) -> None:
    """Offsets found only in an old ``.checkpoint`` move into stores that have none."""
    try:
        legacy = read_checkpoint(path)
    except CheckpointError as exc:
        log.warning("checkpoint.unreadable", error=str(exc))
        return
    for name, tp in changelogs.items():
        store = stores[name]
        if tp in legacy and tp not in store.committed_offsets():
            store.commit({tp: legacy[tp]})
            log.info("checkpoint.migrated", store=name, offset=legacy[tp])


def flush_to_checkpoint(path: Path, stores: Iterable[Store]) -> None:
    """Flush the stores' memtables, then record their offsets in ``.checkpoint``."""
    offsets: dict[TP, int] = {}
    for store in stores:
        store.flush()
        offsets.update(store.committed_offsets())
    write_checkpoint(path, offsets)
