"""What a state directory holds: task directories, their stores, sizes and stored offsets.

Used by ``worker state list``, which is read-only: it never takes the worker's locks and
never creates or changes a file in the state directory (it may run as root beside a
worker running as another user). Two sources of offsets, and the listing says which one:

- ``store``: the changelog offsets committed inside each RocksDB store, the authoritative
  ones, read by opening each store read-only (``read_only_metadata``) when no live
  process holds the state directory's lock (:func:`lock_holder`);
- ``checkpoint``: the task's ``.checkpoint`` file, when a live worker holds the lock. It
  is as fresh as the worker's last clean close or checkpoint interval
  (``statestore.checkpoint.interval.ms``); the stores may be further ahead.

Lag against the changelogs comes from :func:`with_lags`, given the changelogs' ends.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from worker.assignment.task_id import TP, TaskId
from worker.errors import WorkerError
from worker.state.checkpoint import CheckpointError, read_checkpoint
from worker.state.directory import CHECKPOINT_FILE, STORES_DIR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store_format import STREAM_TIME, read_only_metadata

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

    ``open_stores`` (read-only) only while no live process holds ``app_dir``'s lock.
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


def lock_holder(lock_file: Path) -> str | None:
    """The pid of the process holding the ``flock`` on ``lock_file``; None when free.

    Read from ``/proc/locks``, so the lock is never taken, not even for an instant (a
    worker starting at that instant would find it held and exit). Where ``/proc/locks``
    cannot be read, the pid the holder wrote into the file counts while that process
    exists.
    """
    try:
        inode = lock_file.stat().st_ino
    except FileNotFoundError:
        return None
    try:
        with open("/proc/locks", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return _live_pid_in(lock_file)
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5472274 0 EOF"; "->" marks a waiter
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            return fields[4]
    return None


def _live_pid_in(lock_file: Path) -> str | None:
    try:
        pid = int(lock_file.read_text(encoding="ascii").strip())
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except (OSError, ValueError):
        return "unknown"
    return str(pid)


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
            info, offsets = _read_store(path, env, info)
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


def _read_store(path: Path, env: RocksDBEnv, info: StoreInfo) -> tuple[StoreInfo, dict[TP, int]]:
    """Open a store read-only just long enough to read its offsets and key estimate.

    A directory without a database (no ``CURRENT`` file) is left alone.
    """
    if not (path / "CURRENT").exists():
        return replace(info, error="no database"), {}
    try:
        keys, offsets = read_only_metadata(path, env.options(), env.offsets_options())
    except (WorkerError, OSError) as exc:
        return replace(info, error=str(exc)), {}
    offsets.pop(STREAM_TIME, None)
    return replace(info, keys=keys), offsets
