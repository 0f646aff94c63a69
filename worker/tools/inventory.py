"""What a state directory holds: task directories, their stores, sizes and stored offsets.

Used by ``worker state list``. Two sources of offsets, and the listing says which one:

- ``store``: the changelog offsets committed inside each RocksDB store, the authoritative
  ones. Reading them opens the stores, so it is done only while this tool holds the
  state directory's process lock (no worker can start meanwhile);
- ``checkpoint``: the task's ``.checkpoint`` file, when a live worker holds the lock. It
  is as fresh as the worker's last clean close or checkpoint interval
  (``statestore.checkpoint.interval.ms``); the stores may be further ahead.

Lag against the changelogs comes from :func:`with_lags`, given the changelogs' ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from worker.assignment.task_id import TP, TaskId
from worker.errors import WorkerError
from worker.state.checkpoint import CheckpointError, read_checkpoint
from worker.state.directory import CHECKPOINT_FILE, STORES_DIR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

# Enough for opening stores one at a time to read their offsets.
_TOOL_MEMORY = 16 * MiB


@dataclass(frozen=True)
class OffsetInfo:
    """A changelog partition: the offset stored locally (last record applied), the
    changelog's end when known, and the lag (records between the two)."""

    topic: str
    partition: int
    offset: int
    end: int | None = None

    @property
    def lag(self) -> int | None:
        return None if self.end is None else max(0, self.end - (self.offset + 1))


@dataclass(frozen=True)
class StoreInfo:
    name: str
    bytes: int
    keys: int | None = None  # RocksDB's estimate; only when the store was opened
    error: str | None = None


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    bytes: int
    has_checkpoint: bool
    stores: tuple[StoreInfo, ...]
    offsets: tuple[OffsetInfo, ...]
    error: str | None = None

    @property
    def lag(self) -> int | None:
        """Total records behind the changelogs; None without offsets or with an unknown end."""
        lags = [o.lag for o in self.offsets]
        if not lags or any(lag is None for lag in lags):
            return None
        return sum(lag or 0 for lag in lags)


@dataclass(frozen=True)
class StateInventory:
    app_dir: Path
    offsets_from: str  # "store" or "checkpoint"
    in_use_by: str | None  # pid of the live worker holding the lock, if any
    tasks: tuple[TaskInfo, ...] = ()
    ends_known: bool = False
    notes: tuple[str, ...] = field(default=())

    def changelog_partitions(self) -> list[TP]:
        return sorted({(o.topic, o.partition) for t in self.tasks for o in t.offsets})

    def to_json(self) -> dict[str, Any]:
        return {
            "app_dir": str(self.app_dir),
            "offsets_from": self.offsets_from,
            "in_use_by_pid": self.in_use_by,
            "ends_known": self.ends_known,
            "notes": list(self.notes),
            "tasks": [
                {
                    "task_id": t.task_id,
                    "bytes": t.bytes,
                    "checkpoint": t.has_checkpoint,
                    "lag": t.lag,
                    "error": t.error,
                    "stores": [
                        {"name": s.name, "bytes": s.bytes, "keys": s.keys, "error": s.error}
                        for s in t.stores
                    ],
                    "offsets": [
                        {
                            "topic": o.topic,
                            "partition": o.partition,
                            "offset": o.offset,
                            "end": o.end,
                            "lag": o.lag,
                        }
                        for o in t.offsets
                    ],
                }
                for t in self.tasks
            ],
        }


def inspect(
    app_dir: Path, task_ids: list[TaskId], open_stores: bool, in_use_by: str | None = None
) -> StateInventory:
    """Describe every task directory in ``task_ids``.

    ``open_stores`` only while the caller holds the process lock of ``app_dir``.
    """
    env = RocksDBEnv(_TOOL_MEMORY) if open_stores else None
    tasks = tuple(_inspect_task(app_dir / str(t), env) for t in task_ids)
    return StateInventory(app_dir, "store" if open_stores else "checkpoint", in_use_by, tasks)


def with_lags(inventory: StateInventory, ends: Mapping[TP, int]) -> StateInventory:
    """The inventory with each offset's changelog end filled in where ``ends`` has it."""
    tasks = tuple(
        replace(
            task,
            offsets=tuple(replace(o, end=ends.get((o.topic, o.partition))) for o in task.offsets),
        )
        for task in inventory.tasks
    )
    return replace(inventory, tasks=tasks, ends_known=True)


def directory_bytes(path: Path) -> int:
    """Bytes of every regular file under ``path`` (0 if it vanished meanwhile)."""
    total = 0
    for entry in path.rglob("*"):
        try:
            if entry.is_file() and not entry.is_symlink():
                total += entry.stat().st_size
        except OSError:
            continue
    return total


def _inspect_task(task_dir: Path, env: RocksDBEnv | None) -> TaskInfo:
    checkpoint_path = task_dir / CHECKPOINT_FILE
    error: str | None = None
    try:
        checkpointed = read_checkpoint(checkpoint_path)
    except CheckpointError as exc:
        checkpointed, error = {}, str(exc)
    stores_dir = task_dir / STORES_DIR
    names = (
        sorted(p.name for p in stores_dir.iterdir() if p.is_dir()) if stores_dir.is_dir() else []
    )
    stores: list[StoreInfo] = []
    stored: dict[TP, int] = {}
    for name in names:
        path = stores_dir / name
        info = StoreInfo(name, directory_bytes(path))
        if env is not None:
            info, offsets = _read_store(path, name, env, info)
            stored.update(offsets)
        stores.append(info)
    offsets = stored if env is not None else checkpointed
    return TaskInfo(
        task_id=task_dir.name,
        bytes=directory_bytes(task_dir),
        has_checkpoint=checkpoint_path.exists(),
        stores=tuple(stores),
        offsets=tuple(OffsetInfo(t, p, o) for (t, p), o in sorted(offsets.items())),
        error=error,
    )


def _read_store(
    path: Path, name: str, env: RocksDBEnv, info: StoreInfo
) -> tuple[StoreInfo, dict[TP, int]]:
    """Open a store just long enough to read its offsets and key estimate.

    A directory without a database (no ``CURRENT`` file) is left alone: opening it would
    create an empty store.
    """
    if not (path / "CURRENT").exists():
        return replace(info, error="no database"), {}
    try:
        store = Store.open(path, env, name)
    except WorkerError as exc:
        return replace(info, error=str(exc)), {}
    try:
        return replace(info, keys=store.approximate_num_keys()), store.committed_offsets()
    finally:
        store.close()
