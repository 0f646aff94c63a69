"""Releasing a store's memtables: the flushes a store offers its owner and the env.

Every write of a store goes through the write-ahead log (see ``Store``), so a flush is
never needed for durability; it releases memory. An idle store keeps its memtable until
something flushes it, and ``RocksDBEnv.store_written`` flushes the largest stores when
the memtables of all of them pass their budget.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import rocksdict

from worker.errors import StoreCorrupted, UnsafeStatePath
from worker.observability import get_logger
from worker.state.confined import remove_tree
from worker.state.rocksdb_errors import StoreClosedError, StoreError, rocksdb_errors

SCRATCH_DIR = ".atomic-flush"  # scratch checkpoint used to flush both families at once

_log = get_logger(component="store")


def flush_atomically(db: rocksdict.Rdict, path: Path) -> None:
    """Flush the memtables of both column families to disk in one atomic flush.

    rocksdict's ``Rdict.flush()`` flushes only the default family even with
    ``atomic_flush`` (checked on 0.3.29 / RocksDB 9.8.4), so this creates a scratch
    RocksDB checkpoint instead: that path flushes all column families as one atomic
    flush before hard-linking the files, and the scratch copy is deleted.
    """
    remove_scratch(path)
    try:
        with rocksdb_errors(path):
            # log_size_for_flush=0 inside rocksdict: flush first, as one atomic flush
            # of every column family because the options set atomic_flush.
            rocksdict.Checkpoint(db).create_checkpoint(str(path / SCRATCH_DIR))
    finally:
        remove_scratch(path)


def remove_scratch(path: Path) -> None:
    """Delete the scratch checkpoint, and RocksDB's staging copy a crash may have left,
    never beyond the store's directory ``path``. Best effort: a leftover is retried at
    the next flush or open."""
    for name in (SCRATCH_DIR, SCRATCH_DIR + ".tmp"):
        with contextlib.suppress(OSError, UnsafeStatePath):
            remove_tree(path, path / name)


def memtable_bytes(db: rocksdict.Rdict, path: Path) -> int:
    """Bytes of the data family's memtables, those waiting to be flushed included."""
    with rocksdb_errors(path):
        return db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0


def flush_data_family(db: rocksdict.Rdict, path: Path, wait: bool) -> bool:
    """Flush the data family's memtables; False if nothing was started.

    ``wait``: return once the memtables are written. Without it, start the flush and
    return at once, unless a flush of this store is already under way (False then).
    The data family alone is enough: every write went through the WAL, so a crash at any
    point recovers the rest from it. Never raises: the env flushes stores other than the
    one it was called for, and a failure belongs to the flushed store's owner, who meets
    it at that store's next write. It is logged here.
    """
    try:
        with rocksdb_errors(path):
            if not wait and db.property_int_value("rocksdb.mem-table-flush-pending"):
                return False
            db.flush(wait=wait)
    except (StoreError, StoreCorrupted, StoreClosedError) as exc:
        _log.warning("store.flush_failed", path=str(path), error=str(exc))
        return False
    return True
