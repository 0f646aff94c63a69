"""A store whose keys expire: ``ttl.py``'s decisions applied to a :class:`Store`.

Writes keep ``ttl.py``'s stored shape (``expires_at || value``); reads filter on a
stream time the caller passes (``now_ms``: the task's stream time), so a key reads as
absent the moment it expires. :meth:`TtlStore.sweep`, called once per commit before the
changelog is produced, deletes what expired: each key with a changelog tombstone (a
delete in the write buffer), its index entry locally.

The expiry index stays out of the changelog: its writes go to a second, local buffer
(:attr:`TtlStore._index`) that the commit writes in the same RocksDB batch as the data
but that ``pending()`` (what the task sends to the changelog) never shows. A restore or a
standby rebuilds it record by record (:class:`IndexingBatch`), so the index is exact
there too: a restored write or tombstone also drops the key's previous entry.

Interactive queries filter on :attr:`TtlStore.stream_time_ms`, the latest stream time
this store heard of (a sweep's, the one committed with it, or on a restore the write
time of the newest record restored), so they may show a key for a moment after it expired, never before.

Owner thread only, except ``get_committed`` and ``read_committed_range`` (as ``Store``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.closing import Closing
from worker.state import ttl
from worker.state.contracts import RawTtlStore
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.scan import (
    KeyRange,
    Scan,
    check_limit,
    key_range,
    prefix_range,
    successor,
)
from worker.state.store import RestoreBatch, Store

_USER_KEYS = ttl.RESERVED_PREFIX  # user scans stop below the reserved space
_INDEX = prefix_range(ttl.EXPIRY_INDEX_PREFIX)


def open_store(path: Path, env: RocksDBEnv, name: str, ttl_ms: int | None = None) -> Store:
    """A :class:`Store`, or a :class:`TtlStore` when ``ttl_ms`` is given (see Store.open)."""
    if ttl_ms is None:
        return Store.open(path, env, name)
    store = TtlStore.open(path, env, name)
    store.ttl_ms = ttl.check_ttl(ttl_ms)
    return store


@dataclass(frozen=True, slots=True)
class Swept:
    """One sweep: keys deleted (``evicted``), index entries examined, and whether due
    entries were left for the next sweep (``more``)."""

    evicted: int
    examined: int
    more: bool


class TtlStore(Store):
    """A :class:`Store` with per-key TTL (see the module doc). Processors write it with
    :meth:`put_at` and :meth:`remove`, read it with :meth:`get_at` and :meth:`scan_at`;
    the inherited ``put``, ``get`` and ``scan`` see the stored shape (tools only)."""

    ttl_ms: int
    stream_time_ms: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.ttl_ms = 1
        self.stream_time_ms = self.committed_stream_time  # the task's, at its last commit
        self._index: dict[bytes, bytes | None] = {}  # local index writes (None: delete)
        self._writes = 0  # puts since the last sweep: the next sweep's budget
        # The last index entry a sweep deleted: every entry before it is deleted too, so
        # the next sweep starts there instead of walking RocksDB's tombstones of them again.
        self._swept_to: bytes | None = None

    # -- the processor's side ------------------------------------------------------------

    def get_at(self, key: bytes, now_ms: int) -> bytes | None:
        """The value of ``key`` at stream time ``now_ms``; None if absent or expired."""
        if key.startswith(_USER_KEYS):
            return None
        return ttl.live_value(self.get(key), now_ms)

    def put_at(self, key: bytes, value: bytes, write_ms: int) -> None:
        """Buffer ``key = value`` written at ``write_ms`` (expiring ``ttl_ms`` later).

        Raises:
            ReservedKey: ``key`` starts with 0xFF.
        """
        expiry = ttl.expires_at(write_ms, self.ttl_ms)
        self.put(ttl.check_key(key), ttl.encode(value, expiry))
        self._index[ttl.index_key(expiry, key)] = b""
        self._writes += 1

    def remove(self, key: bytes) -> None:
        """Buffer a delete of ``key`` (its index entry is dropped by a later sweep).

        Raises:
            ReservedKey: ``key`` starts with 0xFF.
        """
        self.delete(ttl.check_key(key))

    def scan_at(
        self,
        lo: bytes | None,
        hi: bytes | None,
        now_ms: int,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> LiveScan:
        """The live pairs of ``[lo, hi)`` at ``now_ms`` (values without their expiry),
        as ``Store.scan``; the limit counts live pairs only."""
        return self._live(key_range(lo, hi), now_ms, reverse, limit)

    def scan_prefix_at(
        self, prefix: bytes, now_ms: int, *, reverse: bool = False, limit: int | None = None
    ) -> LiveScan:
        """The live pairs whose key starts with ``prefix``, as :meth:`scan_at`."""
        return self._live(prefix_range(prefix), now_ms, reverse, limit)

    def _live(self, keys: KeyRange, now_ms: int, reverse: bool, limit: int | None) -> LiveScan:
        limit = check_limit(limit)
        return LiveScan(self._open_scan(keys.below(_USER_KEYS), reverse, None), now_ms, limit)

    # -- the sweep -----------------------------------------------------------------------

    def sweep(self, now_ms: int) -> Swept:
        """Delete what expired by stream time ``now_ms``, within ``ttl.sweep_budget``.

        Steps (``ttl.plan_sweep``): 1. walk the index (local writes merged with RocksDB)
        from its start; 2. each due entry whose key still carries that expiry: delete the
        key in the write buffer (so the commit tombstones it in the changelog); 3. every
        due entry examined: delete it locally. The caller commits next.
        """
        self.stream_time_ms = max(self.stream_time_ms, now_ms)
        budget = ttl.sweep_budget(self._writes)
        with self._index_scan(None, self._sweep_start()) as entries:
            plan = ttl.plan_sweep((entry for entry, _ in entries), now_ms, budget, self.get)
        for key in plan.expired:
            self.delete(key)
        for entry in plan.index_deletes:
            self._index[entry] = None
        if plan.index_deletes:
            self._swept_to = plan.index_deletes[-1]
        self._writes = 0
        return Swept(len(plan.expired), len(plan.index_deletes), plan.more)

    def backlog(self, now_ms: int, cap: int) -> int:
        """Index entries due at ``now_ms`` not swept yet, counted up to ``cap``."""
        due = 0
        with self._index_scan(cap, self._sweep_start()) as entries:
            for entry, _ in entries:
                if ttl.parse_index_key(entry)[0] > now_ms:
                    break
                due += 1
        return due

    # -- commit, restore and queries: the index kept local and exact ---------------------

    def _sweep_start(self) -> bytes | None:
        """Where the index still has entries: the last one swept, or a newer write's entry
        before it (a late record's), whichever is first; None: from the start."""
        start = self._swept_to
        if start is None:
            return None
        return min(
            (e for e, v in self._index.items() if v is not None and e < start), default=start
        )

    def _index_scan(self, limit: int | None, start: bytes | None = None) -> Scan:
        """The index in expiry order from ``start``, its local writes merged with RocksDB."""
        found = _INDEX if start is None else KeyRange(start, _INDEX.hi)
        return self._scans.open(self._require_open(), self._index, found, False, limit)

    def _write(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        offsets: dict[tuple[str, int], int],
        options: Any,
    ) -> None:
        super()._write(chain(records, self._index.items()), offsets, options)
        self._index.clear()

    def _has_local_writes(self) -> bool:
        return super()._has_local_writes() or bool(self._index)

    def discard_pending(self) -> None:
        super().discard_pending()
        self._index.clear()
        self._swept_to = None  # the sweep's deletes are gone: its entries are back

    def restore_batch(self) -> RestoreBatch:
        return IndexingBatch(self, super().restore_batch())

    def write_restored(
        self,
        batch: RestoreBatch,
        offsets: Mapping[tuple[str, int], int],
        stream_time: int = -1,
    ) -> None:
        if isinstance(batch, IndexingBatch):
            self.stream_time_ms = max(self.stream_time_ms, batch.newest_write_ms)
            batch = batch.writes
        super().write_restored(batch, offsets, stream_time)

    def get_committed(self, key: bytes) -> bytes | None:
        if key.startswith(_USER_KEYS):
            return None
        return ttl.live_value(super().get_committed(key), self.stream_time_ms)

    def read_committed_range(
        self, found: KeyRange, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """As ``Store.read_committed_range``, expired keys left out (the limit counts the
        live ones: more chunks are read while expired keys fill them)."""
        now, found, live = self.stream_time_ms, found.below(_USER_KEYS), []
        while True:
            chunk = super().read_committed_range(found, reverse=reverse, limit=limit)
            for key, stored in chunk:
                value = ttl.live_value(stored, now)
                if value is not None:
                    live.append((key, value))
            if limit is None or len(chunk) < limit or len(live) >= limit:
                return live[:limit]
            last = chunk[-1][0]
            found = KeyRange(found.lo, last) if reverse else KeyRange(successor(last), found.hi)


class LiveScan(Closing):
    """A scan of a TTL store as its user sees it: expired keys skipped, values without
    their expiry, at most ``limit`` pairs. Closes like the :class:`Scan` it wraps."""

    def __init__(self, scan: Scan, now_ms: int, limit: int | None) -> None:
        self._scan = scan
        self._now = now_ms
        self._remaining = limit

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        if self._remaining == 0:
            self.close()
            raise StopIteration
        for key, stored in self._scan:
            expiry, value = ttl.decode(stored)
            if expiry > self._now:
                if self._remaining is not None:
                    self._remaining -= 1
                return key, value
        raise StopIteration

    def close(self) -> None:
        self._scan.close()


class IndexingBatch:
    """A restore batch of a TTL store: each restored put or tombstone also updates the
    key's index entry (the previous one dropped, the new one added), so the index of a
    restored or standby store equals its active's, and stays the size of the store."""

    def __init__(self, store: TtlStore, writes: RestoreBatch) -> None:
        self.writes = writes
        self.newest_write_ms = -1
        self._store = store
        self._latest: dict[bytes, bytes | None] = {}  # this batch's writes, by key
        self._records = 0

    def _previous(self, key: bytes) -> bytes | None:
        if key in self._latest:
            return self._latest[key]
        return self._store._read_committed(key)

    def put(self, key: bytes, value: bytes) -> None:
        old, new = ttl.index_changes(key, self._previous(key), ttl.decode(value)[0])
        if old is not None:
            self.writes.delete(old)
        self.writes.put(key, value)
        self.writes.put(new, b"")
        self._latest[key] = value
        self._records += 1
        written = ttl.decode(value)[0] - self._store.ttl_ms
        self.newest_write_ms = max(self.newest_write_ms, written)

    def delete(self, key: bytes) -> None:
        old = self._previous(key)
        if old is not None:
            self.writes.delete(ttl.index_key_for(key, old))
        self.writes.delete(key)
        self._latest[key] = None
        self._records += 1

    def len(self) -> int:
        return self._records

    def is_empty(self) -> bool:
        return self.writes.is_empty()


if TYPE_CHECKING:  # mypy holds the store to the contract its view uses
    _TTL: type[RawTtlStore] = TtlStore
