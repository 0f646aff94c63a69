"""One RocksDB key-value store: write buffer, atomic commit of data with changelog offsets.

The only module (with ``rocksdb_env.py``) that imports rocksdict. Layout of one store::

    default column family   user data, raw bytes keys and values
    "offsets" family        b"<topic> <partition>" -> 8-byte big-endian signed offset
                            b"format_version"      -> 8-byte big-endian version (1)

Writes during processing go to an in-memory buffer; :meth:`Store.commit` writes the
buffer and the new changelog offsets in ONE ``WriteBatch`` with one ``db.write``, so data
and offsets can never disagree, whatever instant the process dies at (atomic
checkpointing, KIP-1035 style). Offset keys contain a space and topic names cannot, so
the format record can never collide with an offset.

rocksdict errors are plain ``Exception`` objects carrying RocksDB's status text; they are
classified in exactly one place, :func:`_translate`.

Thread-safety: one owner thread (the task's) calls everything, with one exception:
:meth:`Store.get_committed` may be called from any thread (interactive queries on the HTTP
threads). It and the final step of :meth:`Store.close` hold the same lock, so such a read
either completes before the database is closed or raises :class:`StoreClosedError`; it can
never touch a closed database. The owner's own reads (:meth:`Store.get`) skip the lock: the
owner never races itself, and the per-record path stays free of it.
"""

from __future__ import annotations

import contextlib
import shutil
import struct
import threading
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple, NoReturn, Protocol, cast

import rocksdict

from worker.errors import FatalError, StateLocked, StoreCorrupted, WorkerError
from worker.observability import get_logger
from worker.state.rocksdb_env import RocksDBEnv

FORMAT_VERSION = 1
OFFSETS_FAMILY = "offsets"
_FORMAT_KEY = b"format_version"
_FLUSH_DIR = ".atomic-flush"  # scratch checkpoint used to flush both families at once
_INT64 = struct.Struct(">q")
_ABSENT = object()  # a key not in the write buffer (None there means a buffered delete)
# What one read-cache entry costs beyond its key and value: two bytes objects' headers
# and a dict slot.
_CACHE_ENTRY_BYTES = 112
_Records = Generator[tuple[bytes, bytes], None, None]

_log = get_logger(component="store")


class RestoreBatch(Protocol):
    """Restored records being gathered for one atomic write (see ``Store.restore_batch``)."""

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def len(self) -> int: ...

    def is_empty(self) -> bool: ...


class ReadPath(NamedTuple):
    """What :meth:`Store.get` does, in three calls (see :meth:`Store.read_path`): each
    lookup is a ``dict.get`` (key, default), returning the default when the key is not
    there; ``miss`` reads RocksDB."""

    buffered: Callable[[bytes, object], object]
    cached: Callable[[bytes, object], object]
    miss: Callable[[bytes], bytes | None]


class StoreError(FatalError):
    """RocksDB failed in a way wiping the store would not fix (disk full, permissions,
    misuse of the API). Fatal for the worker."""


class StoreClosedError(WorkerError):
    """The store was closed (task closed or migrated); an interactive query should retry
    against the new owner."""


def _translate(path: Path, exc: BaseException) -> BaseException:
    """Map a rocksdict error onto the taxonomy; anything not from rocksdict passes through.

    rocksdict raises bare ``Exception`` with RocksDB's status string, e.g.
    ``"Corruption: Sst file size mismatch: ..."`` or ``"IO error: While lock file: ...``.
    A file the database references but cannot find is corruption too (deleted SST or
    MANIFEST), as is a column family we do not know (another format).
    """
    if isinstance(exc, rocksdict.DbClosedError):
        return StoreClosedError(f"store {path} is closed")
    if type(exc) is not Exception:
        return exc
    message = " ".join(str(exc).split())
    if (
        message.startswith("Corruption:")
        or "No such file or directory" in message
        or "Column families not opened" in message
    ):
        return StoreCorrupted(str(path), message)
    if message.startswith("IO error") and "lock" in message.lower():
        return StateLocked(f"store {path} is already open in this or another process: {message}")
    if "already closed" in message:
        return StoreClosedError(f"store {path} is closed")
    return StoreError(f"store {path}: {message}")


def _reraise(path: Path, exc: BaseException) -> NoReturn:
    translated = _translate(path, exc)
    if translated is exc:
        raise exc
    raise translated from exc


@contextlib.contextmanager
def _rocksdb_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        _reraise(path, exc)


class Store:
    """A RocksDB store with a read-your-writes buffer and atomic (data, offsets) commits.

    Lifecycle: :meth:`open` -> put/delete/get ... commit ... -> :meth:`close`. ``close``
    is idempotent; every other method raises :class:`StoreClosedError` once closed.

    WAL rule. Every write (commits and restored batches) goes through the write-ahead
    log, so each batch survives a process crash on its own and restore progress is never
    lost. (Restoring with the WAL off was faster, but a kill -9 then lost every batch
    still in the memtable, and mixing WAL-off and WAL-on writes needed flushes in
    between to stay consistent.) :meth:`flush` still exists to release an idle store's
    memtable: rocksdict's ``Rdict.flush()`` flushes only the default family even with
    ``atomic_flush`` (checked on 0.3.29 / RocksDB 9.8.4), so it creates a scratch RocksDB
    checkpoint instead: that path flushes all column families as one atomic flush before
    hard-linking the files, and the scratch copy is deleted.
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
        # Committed values read lately (None: absent), owner thread only. Invariant: each
        # entry equals what RocksDB holds; commits update it, restored batches clear it.
        self._cache: dict[bytes, bytes | None] = {}
        self._cache_bytes = 0
        self._offsets_family: rocksdict.ColumnFamily | None = db.get_column_family_handle(
            OFFSETS_FAMILY
        )
        self._offsets = offsets
        self._buffer: dict[bytes, bytes | None] = {}
        self._pending_bytes = 0
        self._iterators: weakref.WeakSet[_Records] = weakref.WeakSet()
        # Serialises get_committed (any thread) with closing the database (owner thread).
        self._close_lock = threading.Lock()
        self._wal_on = rocksdict.WriteOptions()

    @classmethod
    def open(cls, path: Path, env: RocksDBEnv, name: str) -> Store:
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
            existed = any(_is_db_file(p.name) for p in path.iterdir())
            _remove_scratch(path)
        except OSError as exc:
            raise StoreError(f"store {path}: {exc}") from exc
        families = {OFFSETS_FAMILY: env.offsets_options()}
        with _rocksdb_errors(path):
            db = rocksdict.Rdict(str(path), env.options(), column_families=families)
        try:
            offsets = _load_metadata(db, path, existed)
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

        Open iterators from :meth:`iter_committed` are closed first: each keeps the
        database (and its LOCK file) alive, and a later reopen would fail.
        """
        db = self._db
        if db is None:
            return
        self.discard_pending()
        self._forget_cached()
        first_error: BaseException | None = None
        try:
            for iterator in list(self._iterators):
                iterator.close()
        except BaseException as exc:
            first_error = exc
        try:
            with self._close_lock:  # waits for a read in progress on another thread
                self._db = None
                self._offsets_family = None
                self._env.store_closed(self)
                with _rocksdb_errors(self.path):
                    db.close()
        except Exception:
            if first_error is None:
                raise
            _log.warning("store.close_failed", path=str(self.path), exc_info=True)
        if first_error is not None:
            raise first_error

    def put(self, key: bytes, value: bytes) -> None:
        """Buffer ``key = value`` until the next commit.

        Called once per record or more (issue 8): one buffer lookup, sizes kept inline.
        """
        if type(value) is not bytes:
            raise TypeError(f"store values must be bytes, got {type(value).__name__}")
        if type(key) is not bytes:
            raise TypeError(f"store keys must be bytes, got {type(key).__name__}")
        if self._db is None:
            raise StoreClosedError(f"store {self.path} is closed")
        buffer = self._buffer
        old = buffer.get(key, _ABSENT)
        buffer[key] = value
        if old is _ABSENT:
            self._pending_bytes += len(key) + len(value)
        else:
            self._pending_bytes += len(value) - (0 if old is None else len(old))  # type: ignore[arg-type]

    def delete(self, key: bytes) -> None:
        """Buffer a delete of ``key`` until the next commit."""
        if type(key) is not bytes:
            raise TypeError(f"store keys must be bytes, got {type(key).__name__}")
        if self._db is None:
            raise StoreClosedError(f"store {self.path} is closed")
        buffer = self._buffer
        old = buffer.get(key, _ABSENT)
        buffer[key] = None
        if old is _ABSENT:
            self._pending_bytes += len(key)
        elif old is not None:
            self._pending_bytes -= len(old)  # type: ignore[arg-type]

    def get(self, key: bytes) -> bytes | None:
        """The value as this task sees it: buffered writes first, then RocksDB.

        Committed values read once are kept in the store's read cache (within its share
        of ``RocksDBEnv.read_cache_bytes``), so a key read again costs a dict lookup, not
        a RocksDB point read.
        """
        value = self._buffer.get(key, _ABSENT)
        if value is _ABSENT:
            value = self._cache.get(key, _ABSENT)
            if value is _ABSENT:
                value = self._read_committed(key)
                self._remember(key, value)  # type: ignore[arg-type]
        return value  # type: ignore[return-value]

    def read_path(self) -> ReadPath:
        """:meth:`get` as three calls a caller can make inline, one Python call fewer per
        read on the per-record path (issue 14): the buffer's lookup, the read cache's, and
        the miss (a RocksDB point read, then remembered). Valid while the store is open:
        neither dict is ever replaced, only changed in place."""
        return ReadPath(self._buffer.get, self._cache.get, self._read_and_remember)

    def _read_and_remember(self, key: bytes) -> bytes | None:
        value = self._read_committed(key)
        self._remember(key, value)
        return value

    def _remember(self, key: bytes, value: bytes | None) -> None:
        size = len(key) + (0 if value is None else len(value)) + _CACHE_ENTRY_BYTES
        if size > self._env.read_cache_share:
            return
        self._cache[key] = value
        self._cache_bytes += size
        if self._cache_bytes > self._env.read_cache_share:
            self._trim_cache()

    def _cache_committed(self) -> None:
        """The buffer was just committed: its values are RocksDB's now, keep them.

        Keys the cache held already are counted again only if new: the added entries are
        counted at the buffer's mean entry size (a count, not a pass over the keys in
        Python; the commit stops processing while it runs).
        """
        cache, buffer = self._cache, self._buffer
        before = len(cache)
        cache.update(buffer)
        added = len(cache) - before
        if added:
            self._cache_bytes += added * (self._pending_bytes // len(buffer) + _CACHE_ENTRY_BYTES)
        if self._cache_bytes > self._env.read_cache_share:
            self._trim_cache()

    def _trim_cache(self) -> None:
        """Over its share: keep the entries added last, about half the share.

        Half, so that a trim comes at most once per half a share of new entries; with a
        key space larger than the cache, emptying it instead (as before issue 14) made
        every read after a commit a RocksDB point read. The entries kept are counted at
        the cache's mean entry size, so the trim is three C calls over the entries, not a
        Python loop (it runs inside commits, which stop processing).
        """
        cache, used = self._cache, self._cache_bytes
        count = len(cache)
        keep = count * (self._env.read_cache_share // 2) // used if used > 0 else 0
        entries = list(cache.items())[count - keep :] if keep else []
        cache.clear()  # in place: read paths hold the dict (see read_path)
        cache.update(entries)
        self._cache_bytes = used * keep // count if count else 0

    def _forget_cached(self) -> None:
        self._cache.clear()
        self._cache_bytes = 0

    def pending(self) -> Mapping[bytes, bytes | None]:
        """Read-only live view of the buffer (``None`` = delete)."""
        return MappingProxyType(self._buffer)

    @property
    def pending_bytes(self) -> int:
        """Approximate bytes buffered (keys + values), kept up to date in O(1) per write."""
        return self._pending_bytes

    @property
    def read_cache_bytes(self) -> int:
        """Approximate bytes the read cache holds (within ``RocksDBEnv.read_cache_share``)."""
        return self._cache_bytes

    def discard_pending(self) -> None:
        """Forget every buffered write (dirty close, revive after a failed commit)."""
        self._buffer.clear()
        self._pending_bytes = 0

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """The changelog offsets stored with the data (a copy)."""
        return dict(self._offsets)

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically write the buffer and ``offsets`` (merged over the stored ones).

        Steps: 1. nothing buffered and no offset changes -> return; 2. one WriteBatch
        holding every buffered put/delete plus the changed offsets; 3. one ``db.write``
        with the WAL on (a process crash keeps it; after power loss RocksDB recovers an
        earlier commit, never part of one); 4. clear the buffer and update the cached
        offsets.

        If the write raises, nothing was written and the buffer is kept.
        """
        self._require_open()
        changed = self._changed(offsets)
        if not self._buffer and not changed:
            return
        self._write(self._buffer.items(), changed, self._wal_on)
        self._cache_committed()
        self.discard_pending()

    def restore_batch(self) -> RestoreBatch:
        """An empty batch of restored records for :meth:`write_restored`.

        The restore path calls its ``put(key, value)`` and ``delete(key)`` once per
        changelog record, straight into a RocksDB write batch: no intermediate list.
        """
        return rocksdict.WriteBatch(raw_mode=True)  # type: ignore[no-any-return]

    def write_restored(self, batch: RestoreBatch, offsets: Mapping[tuple[str, int], int]) -> None:
        """Write one batch of changelog records (from :meth:`restore_batch`) with their new
        offsets, in one atomic RocksDB write.

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
        changed = self._changed(offsets)
        if batch.is_empty() and not changed:
            return
        writes = cast(rocksdict.WriteBatch, batch)
        self._put_offsets(writes, changed)
        with _rocksdb_errors(self.path):
            db.write(writes, self._wal_on)
        self._offsets.update(changed)
        self._forget_cached()  # the batch's keys are not listed anywhere else
        self._env.store_written()

    def flush(self) -> None:
        """Flush the memtables of both column families to disk in one atomic flush.

        Worth calling when a store goes quiet: the shared write buffer manager only flushes
        stores that are being written, so an idle store keeps its memtable until flushed.
        """
        self._atomic_flush(self._require_open())

    def flush_in_background(self) -> None:
        """Start flushing the data family's memtable and return without waiting.

        For a store that just finished restoring: its memtable is released without holding
        up the task that waits to process. Flushing the data family alone is safe because
        every write went through the WAL: a crash at any point recovers the rest from it.
        """
        db = self._require_open()
        with _rocksdb_errors(self.path):
            db.flush(wait=False)

    def memtable_bytes(self) -> int:
        """Bytes of the data family's memtables, those waiting to be flushed included (for
        ``RocksDBEnv.store_written``; the offsets family's memtable is a few KiB)."""
        db = self._require_open()
        with _rocksdb_errors(self.path):
            return db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0

    def flush_memtable(self, wait: bool) -> bool:
        """Flush the data family's memtables (``RocksDBEnv.store_written`` calls it, on the
        owner thread, when the memtables of all stores grow past their budget).

        ``wait``: return once the memtables are written. Without it, start the flush and
        return at once, unless a flush of this store is already under way (False then).

        The data family alone, as in :meth:`flush_in_background`: every write went through
        the WAL, so a crash at any point recovers the rest from it. Never raises: the env
        flushes stores other than the one it was called for, and a failure belongs to this
        store's owner, who meets it at this store's next write. It is logged here.
        """
        db = self._db
        if db is None:
            return False
        try:
            with _rocksdb_errors(self.path):
                if not wait and db.property_int_value("rocksdb.mem-table-flush-pending"):
                    return False
                db.flush(wait=wait)
        except (StoreError, StoreCorrupted, StoreClosedError) as exc:
            _log.warning("store.flush_failed", path=str(self.path), error=str(exc))
            return False
        return True

    def _changed(self, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        for (topic, partition), offset in offsets.items():
            if offset < 0 or " " in topic:
                raise ValueError(f"invalid changelog offset {topic} {partition} {offset}")
        return {tp: o for tp, o in offsets.items() if self._offsets.get(tp) != o}

    def _write(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        offsets: dict[tuple[str, int], int],
        options: rocksdict.WriteOptions,
    ) -> None:
        """Write records and offsets as ONE batch, then remember the offsets."""
        db = self._require_open()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._put_offsets(batch, offsets)
        with _rocksdb_errors(self.path):
            db.write(batch, options)
        self._offsets.update(offsets)
        self._env.store_written()

    def _put_offsets(
        self, batch: rocksdict.WriteBatch, offsets: Mapping[tuple[str, int], int]
    ) -> None:
        for (topic, partition), offset in offsets.items():
            batch.put(f"{topic} {partition}".encode(), _INT64.pack(offset), self._offsets_family)

    def _atomic_flush(self, db: rocksdict.Rdict) -> None:
        _remove_scratch(self.path)
        try:
            with _rocksdb_errors(self.path):
                # log_size_for_flush=0 inside rocksdict: flush first, as one atomic flush
                # of every column family because the options set atomic_flush.
                rocksdict.Checkpoint(db).create_checkpoint(str(self.path / _FLUSH_DIR))
        finally:
            _remove_scratch(self.path)

    def get_committed(self, key: bytes) -> bytes | None:
        """The committed value, bypassing the buffer (interactive queries).

        Thread-safe (see the module doc): may be called from any thread while the owner
        works. Raises StoreClosedError once the store is closed, also when the close
        happens on the owner thread at the same moment.
        """
        with self._close_lock:
            return self._read_committed(key)

    def _read_committed(self, key: bytes) -> bytes | None:
        db = self._require_open()
        try:
            return db.get(key)  # type: ignore[no-any-return]
        except Exception as exc:
            _reraise(self.path, exc)

    def iter_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed (key, value) of the data family, in key order; never offsets.

        Raises StoreCorrupted while iterating if a block is unreadable: rocksdict's own
        ``items()`` silently ends early on a checksum error, so the iterator status is
        checked at the end.
        """
        iterator = _scan(self._require_open(), self.path)
        self._iterators.add(iterator)
        return iterator

    def approximate_num_keys(self) -> int:
        """RocksDB's estimate of keys in the data family (for tools)."""
        db = self._require_open()
        with _rocksdb_errors(self.path):
            return db.property_int_value("rocksdb.estimate-num-keys") or 0

    def disk_size_bytes(self) -> int:
        """Bytes of every file under the store's directory (works on a closed store too)."""
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def _require_open(self) -> rocksdict.Rdict:
        if self._db is None:
            raise StoreClosedError(f"store {self.path} is closed")
        return self._db


def _remove_scratch(path: Path) -> None:
    """Delete the scratch checkpoint, and RocksDB's staging copy a crash may have left."""
    for name in (_FLUSH_DIR, _FLUSH_DIR + ".tmp"):
        shutil.rmtree(path / name, ignore_errors=True)


def _scan(db: rocksdict.Rdict, path: Path) -> _Records:
    """Iterate a family, checking the cursor status at the end (see ``iter_committed``)."""
    cursor = None
    try:
        cursor = db.iter()
        cursor.seek_to_first()
        while cursor.valid():
            yield cursor.key(), cursor.value()
            cursor.next()
        cursor.status()
    except Exception as exc:
        _reraise(path, exc)
    finally:
        del cursor  # releases the database reference the cursor holds


def _load_metadata(db: rocksdict.Rdict, path: Path, existed: bool) -> dict[tuple[str, int], int]:
    """Read the offsets family; check (or, for a new store, write) the format record."""
    with _rocksdb_errors(path):
        # Dropping this family handle flushes that family alone: harmless here, since
        # nothing has been written without the WAL yet.
        entries = list(_scan(db.get_column_family(OFFSETS_FAMILY), path))
    version, offsets = _decode_metadata(path, entries)
    if version is None:
        if existed:
            raise StoreCorrupted(
                str(path), "format record missing: files lost or MANIFEST truncated"
            )
        _write_format_record(db, path)
    elif version != FORMAT_VERSION:
        raise StoreCorrupted(str(path), f"unknown format version {version}")
    return offsets


def _is_db_file(name: str) -> bool:
    """A file RocksDB leaves in a database directory (so the store existed before)."""
    return name.startswith(("CURRENT", "IDENTITY", "MANIFEST-")) or name.endswith((".sst", ".log"))


def _decode_metadata(
    path: Path, entries: list[tuple[bytes, bytes]]
) -> tuple[int | None, dict[tuple[str, int], int]]:
    version: int | None = None
    offsets: dict[tuple[str, int], int] = {}
    for key, value in entries:
        try:
            number = _INT64.unpack(value)[0]
            if key == _FORMAT_KEY:
                version = number
                continue
            topic, partition = key.decode().split(" ")
            offsets[(topic, int(partition))] = number
        except (struct.error, ValueError, UnicodeDecodeError):
            raise StoreCorrupted(str(path), f"unreadable offsets record {key!r}") from None
    return version, offsets


def _write_format_record(db: rocksdict.Rdict, path: Path) -> None:
    # Synced: a crash right after creation must not leave a store that looks truncated.
    options = rocksdict.WriteOptions()
    options.sync = True
    batch = rocksdict.WriteBatch(raw_mode=True)
    with _rocksdb_errors(path):
        family = db.get_column_family_handle(OFFSETS_FAMILY)
        batch.put(_FORMAT_KEY, _INT64.pack(FORMAT_VERSION), family)
        db.write(batch, options)
        del family
    _log.info("store.created", path=str(path))
