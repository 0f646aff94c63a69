"""One RocksDB key-value store: write buffer, atomic commit of data with changelog offsets.

The rocksdict importers are this module and its parts: ``store_format.py`` (the on-disk
layout), ``store_scans.py`` (the cursors of range and prefix scans), ``rocksdb_errors.py``
(the one place rocksdict's errors are classified), ``memtables.py`` (flushes) and
``rocksdb_env.py`` (resources shared by every store).

Writes during processing go to an in-memory buffer; :meth:`Store.commit` writes the
buffer and the new changelog offsets in ONE ``WriteBatch`` with one ``db.write``, so data
and offsets can never disagree, whatever instant the process dies at (atomic
checkpointing, KIP-1035 style). Reads go through the buffer, then the read cache
(``read_cache.py``), then RocksDB; :meth:`Store.read_path` hands that path out as a
:class:`~worker.state.contracts.ReadPath`.

Thread-safety: one owner thread (the task's) calls everything, with one exception:
:meth:`Store.get_committed` may be called from any thread (interactive queries on the HTTP
threads). It and the final step of :meth:`Store.close` hold the same lock, so such a read
either completes before the database is closed or raises :class:`StoreClosedError`; it can
never touch a closed database. The owner's own reads (:meth:`Store.get`) skip the lock: the
owner never races itself, and the per-record path stays free of it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final, Protocol, Self, cast

import rocksdict

from worker.observability import get_logger
from worker.state.contracts import ReadPath
from worker.state.memtables import Flushable, remove_scratch
from worker.state.read_cache import ReadCache
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.rocksdb_errors import (
    StoreClosedError,
    StoreError,
    StoreHealing,
    reraise,
    rocksdb_errors,
)
from worker.state.store_format import (
    OFFSETS_FAMILY,
    STREAM_TIME,
    encode_offset,
    is_db_file,
    load_metadata,
    offset_key,
)
from worker.state.store_scans import OpenScans, Scannable
from worker.state.write_buffer import WriteBuffer, WriteClock

__all__ = ["ReadPath", "RestoreBatch", "Store", "StoreClosedError", "StoreError", "StoreHealing"]

_log = get_logger(component="store")

_ABSENT = object()  # a key not in the write buffer (None there means a buffered delete)


def _unwatched(reason: str) -> None:
    """The corruption hook of a store nobody watches (tools, tests): nothing to heal."""


class RestoreBatch(Protocol):
    """Restored records being gathered for one atomic write (see ``Store.restore_batch``)."""

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def len(self) -> int: ...

    def is_empty(self) -> bool: ...


class Store(Scannable, Flushable):
    """A RocksDB store with a read-your-writes buffer and atomic (data, offsets) commits.

    Lifecycle: :meth:`open` -> put/delete/get ... commit ... -> :meth:`close`. ``close``
    is idempotent; every other method raises :class:`StoreClosedError` once closed.

    ``put(key, value)`` and ``delete(key)`` buffer a write until the next commit. They
    are the write buffer's own methods (``write_buffer.py``), bound when the store opens,
    so a write on the per-record path is one Python call; TypeError for anything but
    bytes.

    WAL rule. Every write (commits and restored batches) goes through the write-ahead
    log, so each batch survives a process crash on its own and restore progress is never
    lost. (Restoring with the WAL off was faster, but a kill -9 then lost every batch
    still in the memtable, and mixing WAL-off and WAL-on writes needed flushes in
    between to stay consistent.) :meth:`flush` still exists to release an idle store's
    memtable (``memtables.py``).
    """

    def __init__(
        self,
        db: rocksdict.Rdict,
        path: Path,
        name: str,
        offsets: dict[tuple[str, int], int],
        env: RocksDBEnv,
    ) -> None:
        """Use :meth:`open`."""
        self.name = name
        self.path = path
        self._db: rocksdict.Rdict | None = db
        self._env = env
        self._cache = ReadCache(env)
        self._offsets_family: rocksdict.ColumnFamily | None = db.get_column_family_handle(
            OFFSETS_FAMILY
        )
        self._offsets = offsets
        self._buffer = WriteBuffer(path)
        self.put: Final = self._buffer.put
        self.delete: Final = self._buffer.delete
        self.delete_range: Final = self._buffer.delete_range
        self._scans = OpenScans(env, path)
        # Serialises get_committed (any thread) with closing the database (owner thread).
        self._close_lock = threading.Lock()
        self.corruption_found: Callable[[str], None] = _unwatched
        self._wal_on = rocksdict.WriteOptions()
        self._read_path: Final = ReadPath(
            self._buffer.lookup, self._cache.lookup, self._read_and_remember
        )

    @classmethod
    def open(cls, path: Path, env: RocksDBEnv, name: str) -> Self:
        """Open (creating if missing) the store at ``path`` with the shared ``env``.

        Raises:
            StoreCorrupted: files unreadable or truncated (bad CURRENT, MANIFEST or SST,
                missing files), an unknown format version, or a database whose format
                record is gone (RocksDB silently opens a truncated MANIFEST as an EMPTY
                database; the missing record is how that is caught).
            StateLocked: the store is already open (this or another process).
            StoreError: anything else (permissions, disk full).
        """
        try:
            path.mkdir(parents=True, exist_ok=True)
            existed = any(is_db_file(p.name) for p in path.iterdir())
            remove_scratch(path)
        except OSError as exc:
            raise StoreError(f"store {path}: {exc}") from exc
        families = {OFFSETS_FAMILY: env.offsets_options()}
        with rocksdb_errors(path):
            db = rocksdict.Rdict(str(path), env.options(), column_families=families)
        try:
            offsets = load_metadata(db, path, existed)
            store = cls(db, path, name, offsets, env)
        except BaseException:
            with contextlib.suppress(Exception):
                db.close()
            raise
        env.store_opened(store)
        return store

    @property
    def closed(self) -> bool:
        return self._db is None

    def close(self) -> None:
        """Drop the buffer and close RocksDB. Idempotent.

        Open scans are closed first: each keeps the database (and its LOCK file) alive,
        and a later reopen would fail.
        """
        db = self._db
        if db is None:
            return
        self._buffer.close()
        self._cache.clear()
        first_error: BaseException | None = None
        try:
            self._scans.close_all()
        except BaseException as exc:
            first_error = exc
        try:
            with self._close_lock:  # waits for a read in progress on another thread
                self._db = None
                self._offsets_family = None
                self._env.store_closed(self)
                with rocksdb_errors(self.path):
                    db.close()
        except Exception:
            if first_error is None:
                raise
            _log.warning("store.close_failed", path=str(self.path), exc_info=True)
        if first_error is not None:
            raise first_error

    def get(self, key: bytes) -> bytes | None:
        """The value as this task sees it: buffered writes first, then RocksDB.

        Committed values read once are kept in the store's read cache (within its share
        of ``RocksDBEnv.read_cache_bytes``), so a key read again costs a dict lookup, not
        a RocksDB point read.
        """
        value = self._buffer.lookup(key, _ABSENT)
        if value is _ABSENT:
            value = self._cache.lookup(key, _ABSENT)
            if value is _ABSENT:
                return self._read_and_remember(key)
        return value  # type: ignore[return-value]

    def read_path(self) -> ReadPath:
        """:meth:`get` as three calls a caller makes inline (the per-record path of the
        typed store views): always the same object, valid for the store's whole life (see
        :class:`ReadPath` for the contract)."""
        return self._read_path

    def _read_and_remember(self, key: bytes) -> bytes | None:
        value = self._read_committed(key)
        self._cache.remember(key, value)
        return value

    def _settle(self) -> None:
        """Buffer what a subclass holds back until the buffer is read (by the changelog
        or a commit): a write that would otherwise repeat on almost every record, such as
        the versioned and windowed stores' observed time, is buffered once here. Runs
        first in :meth:`pending`, :meth:`pending_times` and :meth:`commit`; the plain
        store holds nothing back."""

    def pending(self) -> Mapping[bytes, bytes | None]:
        """Read-only live view of the buffer (``None`` = delete), settled first."""
        self._settle()
        return self._buffer.entries

    def pending_times(self) -> Mapping[bytes, int]:
        """Read-only live view of each buffered key's write time (ms), for its changelog,
        settled first."""
        self._settle()
        return self._buffer.times

    def stamp_writes(self, clock: WriteClock) -> None:
        """Stamp every write from now on with ``clock.timestamp`` (the task's context)."""
        self._buffer.clock = clock

    @property
    def pending_bytes(self) -> int:
        """Approximate bytes buffered (keys + values), kept up to date in O(1) per write."""
        return self._buffer.size_bytes

    @property
    def read_cache_bytes(self) -> int:
        """Approximate bytes the read cache holds (within ``RocksDBEnv.read_cache_share``)."""
        return self._cache.used_bytes

    def discard_pending(self) -> None:
        """Forget every buffered write (dirty close, revive after a failed commit)."""
        self._buffer.clear()

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """The changelog offsets stored with the data (a copy)."""
        return {tp: offset for tp, offset in self._offsets.items() if tp != STREAM_TIME}

    @property
    def committed_stream_time(self) -> int:
        """The task's stream time written by the last :meth:`commit` given one (-1: none)."""
        return self._offsets.get(STREAM_TIME, -1)

    def commit(self, offsets: Mapping[tuple[str, int], int], stream_time: int = -1) -> None:
        """Atomically write the buffer and ``offsets`` (merged over the stored ones), with
        the task's ``stream_time`` when it is known (>= 0).

        Steps: 1. buffer what a subclass held back (:meth:`_settle`); 2. nothing
        buffered and no offset changes -> return; 3. one WriteBatch holding every
        buffered put/delete plus the changed offsets; 4. one ``db.write`` with the WAL on
        (a process crash keeps it; after power loss RocksDB recovers an earlier commit,
        never part of one); 5. clear the buffer and update the cached offsets. Every
        open scan is closed first.

        If the write raises, nothing was written and the buffer is kept.
        """
        self._settle()
        self._require_open()
        self._scans.close_all()
        changed = self._changed(offsets, stream_time)
        if not self._has_local_writes() and not changed:
            return
        self._write(self._buffer.entries.items(), changed, self._wal_on)
        if self._buffer.ranges:
            self._cache.clear()  # it may hold keys the ranges deleted
        if self._buffer:
            self._cache.add_committed(self._buffer.entries, self._buffer.size_bytes)
        self._buffer.clear()  # not discard_pending: a subclass may keep more (ttl_store.py)

    def _has_local_writes(self) -> bool:
        """Whether a commit has anything of this store's to write besides offsets; a
        subclass with writes of its own beside the buffer says so (ttl_store.py: a sweep
        may delete only index entries)."""
        return bool(self._buffer)

    def restore_batch(self) -> RestoreBatch:
        """An empty batch of restored records for :meth:`write_restored`.

        The restore path calls its ``put(key, value)`` and ``delete(key)`` once per
        changelog record, straight into a RocksDB write batch: no intermediate list.
        """
        return rocksdict.WriteBatch(raw_mode=True)  # type: ignore[no-any-return]

    def write_restored(
        self,
        batch: RestoreBatch,
        offsets: Mapping[tuple[str, int], int],
        stream_time: int = -1,
    ) -> None:
        """Write one batch of changelog records (from :meth:`restore_batch`) with their new
        offsets and the task's ``stream_time`` (a stream-time marker's, when the batch
        read one: worker/state/stream_time_marker.py), in one atomic RocksDB write.

        Written with the WAL on like a commit, so restore progress survives a process
        crash batch by batch: a restart resumes after the last batch written instead of at
        the start of the changelog. (With the WAL off, a kill -9 lost every batch still in
        the memtable: consistent, but the progress was gone.)

        Raises:
            StoreError: writes are buffered; restoring under them would reorder history.
        """
        db = self._require_open()
        if self._buffer:
            raise StoreError(
                f"store {self.path}: {len(self._buffer)} uncommitted writes buffered during restore"
            )
        changed = self._changed(offsets, stream_time)
        if batch.is_empty() and not changed:
            return
        writes = cast(rocksdict.WriteBatch, batch)
        self._put_offsets(writes, changed)
        with rocksdb_errors(self.path):
            db.write(writes, self._wal_on)
        self._offsets.update(changed)
        self._cache.clear()  # the batch's keys are not listed anywhere else
        self._env.store_written()

    def _changed(
        self, offsets: Mapping[tuple[str, int], int], stream_time: int
    ) -> dict[tuple[str, int], int]:
        """What a commit or restored batch must write: the offsets that moved, and the
        stream time when it advanced. Raises ValueError for an invalid offset."""
        for (topic, partition), offset in offsets.items():
            if offset < 0 or " " in topic:
                raise ValueError(f"invalid changelog offset {topic} {partition} {offset}")
        changed = {tp: o for tp, o in offsets.items() if self._offsets.get(tp) != o}
        if stream_time > self._offsets.get(STREAM_TIME, -1):
            changed[STREAM_TIME] = stream_time
        return changed

    def _write(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        offsets: dict[tuple[str, int], int],
        options: rocksdict.WriteOptions,
    ) -> None:
        """Write records and offsets as ONE batch, then remember the offsets."""
        db = self._require_open()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for lo, hi in self._buffer.ranges:  # first: the entries were buffered after them
            batch.delete_range(lo, hi)
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._put_offsets(batch, offsets)
        with rocksdb_errors(self.path):
            db.write(batch, options)
        self._offsets.update(offsets)
        self._env.store_written()

    def _put_offsets(
        self, batch: rocksdict.WriteBatch, offsets: Mapping[tuple[str, int], int]
    ) -> None:
        for (topic, partition), offset in offsets.items():
            batch.put(offset_key(topic, partition), encode_offset(offset), self._offsets_family)

    def get_committed(self, key: bytes) -> bytes | None:
        """The committed value, bypassing the buffer (interactive queries).

        Thread-safe (see the module doc): may be called from any thread while the owner
        works. Raises StoreClosedError once the store is closed, also when the close
        happens on the owner thread at the same moment, and StoreHealing (one) when the
        read meets corruption, after reporting it (see ``Scannable._committed_read``).
        """
        with self._committed_read():
            return self._read_committed(key)

    def _read_committed(self, key: bytes) -> bytes | None:
        db = self._require_open()
        try:
            return db.get(key)  # type: ignore[no-any-return]
        except Exception as exc:
            reraise(self.path, exc)

    def approximate_num_keys(self) -> int:
        """RocksDB's estimate of keys in the data family (for tools)."""
        db = self._require_open()
        with rocksdb_errors(self.path):
            return db.property_int_value("rocksdb.estimate-num-keys") or 0

    def disk_size_bytes(self) -> int:
        """Bytes of every file under the store's directory (works on a closed store too)."""
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def _require_open(self) -> rocksdict.Rdict:
        if self._db is None:
            raise StoreClosedError(f"store {self.path} is closed")
        return self._db
