"""A store's scans: RocksDB cursors made for ``scan.py``, registered until closed.

Every scan a processor opens holds a RocksDB iterator, which pins the database (and its
LOCK file) and the memtables and files it started on. So the store keeps each open scan
here, and closes every one of them when it commits (a scan must not outlive the data it
was a view of) and when it closes (a reopen would fail on the LOCK). The count of open
scans over all stores is ``worker_store_open_iterators`` (through ``RocksDBEnv``).

Owner thread only: only the task's thread opens scans. Interactive queries read with
:func:`read_range`, which never registers anything: it reads to the end (at most its
limit) and releases the cursor before it returns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import rocksdict

from worker.errors import StoreCorrupted
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.rocksdb_errors import StoreHealing, reraise
from worker.state.scan import Cursor, KeyRange, Scan, check_limit, key_range, prefix_range
from worker.state.write_buffer import WriteBuffer

_NOTHING_BUFFERED: Mapping[bytes, bytes | None] = {}


class StoreScan(Scan):
    """A :class:`Scan` whose RocksDB errors are classified as the store's
    (``rocksdb_errors.py``: StoreCorrupted for an unreadable block, StoreError else)."""

    def __init__(
        self,
        path: Path,
        cursor: Cursor,
        buffer: Mapping[bytes, bytes | None],
        key_range: KeyRange,
        *,
        reverse: bool = False,
        limit: int | None = None,
        on_close: Callable[[Scan], object] | None = None,
    ) -> None:
        self._path = path
        super().__init__(cursor, buffer, key_range, reverse=reverse, limit=limit, on_close=on_close)

    def __next__(self) -> tuple[bytes, bytes]:
        try:
            return super().__next__()
        except StopIteration:
            raise
        except Exception as exc:
            self.close()
            reraise(self._path, exc)


def cursor(db: rocksdict.Rdict, key_range: KeyRange) -> Cursor:
    """A RocksDB iterator over the data family, bounded above by ``key_range.hi``."""
    options = rocksdict.ReadOptions()
    if key_range.hi is not None:
        options.set_iterate_upper_bound(key_range.hi)
    return db.iter(options)  # type: ignore[no-any-return]


class OpenScans:
    """The scans open over one store, and their count in the shared ``RocksDBEnv``."""

    __slots__ = ("_env", "_open", "_path")

    def __init__(self, env: RocksDBEnv, path: Path) -> None:
        self._env = env
        self._path = path
        self._open: set[Scan] = set()  # strong references: a scan dropped unclosed stays
        # registered, so its cursor is released at the next commit, not whenever GC runs

    def open(
        self,
        db: rocksdict.Rdict,
        buffer: Mapping[bytes, bytes | None],
        key_range: KeyRange,
        reverse: bool,
        limit: int | None,
    ) -> Scan:
        """A scan of ``key_range`` merging ``buffer`` with RocksDB, registered here."""
        try:
            found = StoreScan(
                self._path,
                cursor(db, key_range),
                buffer,
                key_range,
                reverse=reverse,
                limit=limit,
                on_close=self._closed,
            )
        except Exception as exc:
            reraise(self._path, exc)
        self._open.add(found)
        self._env.open_scans += 1
        return found

    def _closed(self, found: Scan) -> None:
        if found in self._open:
            self._open.discard(found)
            self._env.open_scans -= 1

    def __len__(self) -> int:
        return len(self._open)

    def close_all(self) -> None:
        """Close every open scan (commit, close). Idempotent."""
        for found in list(self._open):
            found.close()


def read_range(
    db: rocksdict.Rdict, path: Path, key_range: KeyRange, reverse: bool, limit: int | None
) -> list[tuple[bytes, bytes]]:
    """The committed pairs of ``key_range`` (at most ``limit``), read at once."""
    with StoreScan(
        path, cursor(db, key_range), _NOTHING_BUFFERED, key_range, reverse=reverse, limit=limit
    ) as found:
        return list(found)


class Scannable:
    """The scans of :class:`~worker.state.store.Store`, which provides the attributes below."""

    path: Path
    _scans: OpenScans
    _buffer: WriteBuffer
    _close_lock: threading.Lock
    # Called with the reason when a read from another thread meets corruption (the
    # owning task reports it for healing: worker/tasks/corruption.py).
    corruption_found: Callable[[str], None]

    def _require_open(self) -> rocksdict.Rdict:
        raise NotImplementedError

    @contextlib.contextmanager
    def _committed_read(self) -> Iterator[None]:
        """A read of committed data from any thread: serialised with the store's close
        (StoreClosedError once closed). Corruption met is reported through
        :attr:`corruption_found` and raised as :class:`StoreHealing`, which the reader
        treats as a closed store (a query answers 503 and is retried)."""
        with self._close_lock:
            try:
                yield
            except StoreCorrupted as exc:
                self.corruption_found(exc.reason)
                raise StoreHealing(f"store {self.path} is being healed: {exc.reason}") from exc

    def iter_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed (key, value) of the data family, in key order; never offsets.
        Raises StoreCorrupted while iterating if a block is unreadable (see :meth:`scan`).
        """
        return self._scans.open(self._require_open(), {}, KeyRange(), False, None)

    def scan(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Scan:
        """The pairs of ``[lo, hi)`` in key order, this task's buffered writes merged with
        RocksDB (``scan.py``). Open until closed, the next commit or the store's close.
        Owner thread only.

        Raises:
            ScanRangeError: ``lo > hi``, a bound that is not bytes, a bad limit.
            StoreCorrupted: while iterating, an unreadable block (the cursor's status is
                checked at the end: rocksdict ends silently on a checksum error).
        """
        return self._open_scan(key_range(lo, hi), reverse, limit)

    def scan_prefix(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Scan:
        """The pairs whose key starts with ``prefix``, as :meth:`scan`."""
        return self._open_scan(prefix_range(prefix), reverse, limit)

    def _open_scan(self, found: KeyRange, reverse: bool, limit: int | None) -> Scan:
        check_limit(limit)
        return self._scans.open(self._require_open(), self._buffer.entries, found, reverse, limit)

    def read_committed_range(
        self, found: KeyRange, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The committed pairs of ``found``, at most ``limit`` (interactive queries).
        Thread-safe like ``Store.get_committed``: serialised with the store's close."""
        with self._committed_read():
            return read_range(self._require_open(), self.path, found, reverse, limit)
