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


class Flushable:
    """The flushes of :class:`~worker.state.store.Store`, which provides the attributes
    below (kept here, like the scans in ``store_scans.py``, beside the functions they
    call)."""

    path: Path
    _db: rocksdict.Rdict | None

    def _require_open(self) -> rocksdict.Rdict:
        raise NotImplementedError

    def flush(self) -> None:
        """Flush the memtables of both column families to disk in one atomic flush.

        Worth calling when a store goes quiet: the shared write buffer manager only flushes
        stores that are being written, so an idle store keeps its memtable until flushed.
        """
        flush_atomically(self._require_open(), self.path)

    def flush_in_background(self) -> None:
        """Start flushing the data family's memtable and return without waiting.

        For a store that just finished restoring: its memtable is released without holding
        up the task that waits to process. Flushing the data family alone is safe because
        every write went through the WAL: a crash at any point recovers the rest from it.
        """
        db = self._require_open()
        with rocksdb_errors(self.path):
            db.flush(wait=False)

    def memtable_bytes(self) -> int:
        """Bytes of the data family's memtables, those waiting to be flushed included (for
        ``RocksDBEnv.store_written``; the offsets family's memtable is a few KiB)."""
        return memtable_bytes(self._require_open(), self.path)

    def flush_memtable(self, wait: bool) -> bool:
        """Flush the data family's memtables (``RocksDBEnv.store_written`` calls it, on the
        owner thread, when the memtables of all stores grow past their budget).

        ``wait`` and the result: see :func:`~worker.state.memtables.flush_data_family`.
        Never raises (a failure is logged and met at this store's next write); False on
        a closed store.
        """
        db = self._db
        return db is not None and flush_data_family(db, self.path, wait)
