"""A versioned key-value store: every key's values over time, read as of a timestamp.

Kafka Streams' versioned store (KIP-889) on a :class:`~worker.state.store.Store`, for
stream-table joins as of the stream record's time: ``get_as_of(key, t)`` returns the
version valid at ``t`` (the latest written at or before ``t``), ``get_latest(key)`` the
newest one. Layout: ``versioned_format.py``.

**History and the observed time.** The store's observed time is the largest version
time written to it. ``history_ms`` bounds how far back reads reach and, as in Kafka
Streams, doubles as the store's grace: with ``cutoff = observed - history_ms``, a read as
of a time below the cutoff returns nothing, and a write below it is rejected and
counted (:attr:`VersionedStore.dropped_writes`). Versions no read may return any more (one
superseded at or before the cutoff, a leading tombstone) are deleted when their key is
written next, and by :meth:`VersionedStore.sweep_history`, which the task runs before
each commit: it walks the keys in order, a slice per commit (at least
``versioned_history.MIN_SWEEP_KEYS``, more when more was written; idle while the cutoff
stands still), prunes each key's history the same way and deletes a key whose newest
version is a tombstone at or before the cutoff, so a key never written again loses its
old versions too. Both delete with changelog tombstones: the changelog is compacted like
any key-value store's, so a compacted changelog holds about what the store holds, and a
restore does not bring them back.

**One store, one batch.** Every version, deletion and the observed time go through the
write buffer: the commit writes them with the changelog offsets in one atomic batch and
sends them to the changelog, and a restore or a standby replays the changelog's raw
records (no special restore path), then re-reads the observed time.

Owner thread only, as :class:`Store`; :meth:`VersionedStore.get_committed` (interactive
queries: the latest committed value) may run on any thread.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, cast

from worker.clock import MAX_TIME_MS
from worker.state import versioned_format as fmt
from worker.state import versioned_history as older_versions
from worker.state.contracts import RawVersionedStore, Version
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.rocksdb_errors import reraise
from worker.state.scan import Cursor, KeyRange, prefix_upper_bound, successor
from worker.state.store import RestoreBatch, Store
from worker.state.store_scans import cursor
from worker.state.window_format import decode_meta, encode_meta

_LATEST, _HEAD, _unpack_head = fmt.LATEST_PREFIX, fmt.LATEST_HEAD.size, fmt.LATEST_HEAD.unpack_from
_ABSENT: Any = object()  # a key not in the write buffer or the read cache
_FLAG = _HEAD - 1  # the newest version's value flag: its header's last byte
_LATEST_END = prefix_upper_bound(fmt.LATEST_PREFIX)
_HISTORY_SPACE = KeyRange(fmt.HISTORY_PREFIX, fmt.LATEST_PREFIX)
_NEVER = -(2**63)  # the cutoff of a store never swept to the end


class Put(enum.StrEnum):
    """What a write did: became the key's newest version, an older one, or nothing
    (``REJECTED``: older than the history allows)."""

    LATEST = "latest"
    HISTORY = "history"
    REJECTED = "rejected"


def check_history(history_ms: object) -> int:
    """Raises ValueError: not an int >= 0."""
    if type(history_ms) is not int or history_ms < 0:
        raise ValueError(f"history_ms must be an int >= 0 (ms), got {history_ms!r}")
    return history_ms


class VersionedStore(Store):
    """A store of versions (see the module doc). Open with :meth:`open_versioned`;
    processors use :meth:`put_version`, :meth:`get_latest` and :meth:`get_as_of`."""

    history_ms: int
    observed_ms: int  # -1 before the first write
    _read_floor: int  # reads as of a time below this return nothing: max(cutoff, 0)
    dropped_writes: int
    sweep_min_keys: int = older_versions.MIN_SWEEP_KEYS  # a smaller slice in tests
    _observed_unwritten: bool
    _writes: int  # versions written since the last sweep: the next sweep's budget
    _sweep_from: bytes | None  # where the sweep goes on; None: at the start of a pass
    _pass_cutoff: int  # the cutoff when the current pass began
    _swept_cutoff: int  # the cutoff when the last complete pass began
    _pending_history: older_versions.PendingHistory  # this commit's history writes, by key
    _cursor: Cursor | None = None  # see _history_cursor

    @classmethod
    def open_versioned(cls, path: Path, env: RocksDBEnv, name: str, history_ms: int) -> Self:
        """:meth:`Store.open`, then the observed time read from the store.

        Raises: as :meth:`Store.open`; ValueError for a bad ``history_ms``.
        """
        history = check_history(history_ms)
        store = cast(Self, cls.open(path, env, name))
        store.history_ms = history
        store.dropped_writes = 0
        store._writes = 0
        store._pending_history = older_versions.PendingHistory()
        store._load_observed()
        return store

    def _load_observed(self) -> None:
        """The observed time as committed; the history sweep starts a new pass (the
        deletes of the one under way may be gone with the buffer)."""
        self._observe(decode_meta(self.get(fmt.OBSERVED_MS), -1))
        self._observed_unwritten = False
        self._sweep_from, self._pass_cutoff, self._swept_cutoff = None, _NEVER, _NEVER

    def _observe(self, observed_ms: int) -> None:
        self.observed_ms = observed_ms
        self._read_floor = max(observed_ms - self.history_ms, 0)

    @property
    def cutoff_ms(self) -> int:
        """Reads as of a time below this return nothing; writes below it are rejected."""
        return self.observed_ms - self.history_ms

    # -- writes ---------------------------------------------------------------------

    def put_version(self, key: bytes, value: bytes | None, ts_ms: int) -> Put:
        """Buffer ``value`` (None: a tombstone) as ``key``'s version from ``ts_ms``.

        A version at the time of an existing one replaces it. Steps: 1. reject a write
        below the cutoff; 2. raise the observed time; 3. place the version (the newest
        one moves to history when a later one arrives); 4. prune the key's history
        when its prune time has come.

        Raises:
            ValueError: ``ts_ms`` outside ``[0, MAX_TIME_MS]``.
        """
        if type(ts_ms) is not int or not 0 <= ts_ms < MAX_TIME_MS:
            raise ValueError(f"version time {ts_ms!r} is outside [0, {MAX_TIME_MS})")
        if ts_ms < self.observed_ms - self.history_ms:
            self.dropped_writes += 1
            return Put.REJECTED
        if ts_ms > self.observed_ms:
            self._observe(ts_ms)
            self._observed_unwritten = True
        self._writes += 1
        lkey = fmt.latest_key(key)
        stored = self.get(lkey)
        if stored is None:
            self.put(lkey, fmt.encode_latest(ts_ms, fmt.NO_HISTORY, value))
            return Put.LATEST
        latest = fmt.decode_latest(stored)
        if ts_ms >= latest.ts_ms:
            prune = latest.prune_ms
            if ts_ms > latest.ts_ms:
                self._write_history(key, latest.ts_ms, fmt.encode_version(latest.value))
                if prune == fmt.NO_HISTORY:
                    prune = latest.ts_ms if latest.value is None else ts_ms
            latest = fmt.Latest(ts_ms, prune, value)
            outcome = Put.LATEST
        else:
            self._write_history(key, ts_ms, fmt.encode_version(value))
            latest = latest._replace(prune_ms=min(latest.prune_ms, ts_ms))  # a lower bound
            outcome = Put.HISTORY
        if fmt.prune_due(latest.prune_ms, self.cutoff_ms):
            latest = latest._replace(prune_ms=self._prune(key, latest.ts_ms)[0])
        self.put(lkey, fmt.encode_latest(*latest))
        return outcome

    def _prune(self, key: bytes, latest_ms: int) -> tuple[int, int]:
        """Delete ``key``'s older versions that no read may return: (its new prune time,
        the versions deleted)."""
        versions = [(ts, fmt.decode_version(v)) for ts, v in self._history_of(key)]
        doomed, prune = fmt.plan_prune(versions, latest_ms, self.cutoff_ms)
        for ts in doomed:
            self._write_history(key, ts, None)
        return prune, len(doomed)

    def _write_history(self, key: bytes, ts_ms: int, stored: bytes | None) -> None:
        """Buffer a write (None: a delete) of ``key``'s older version at ``ts_ms``; every
        history write goes through here (``versioned_history.py``)."""
        if stored is None:
            self.delete(fmt.history_key(key, ts_ms))
        else:
            self.put(fmt.history_key(key, ts_ms), stored)
        self._pending_history.record(key, ts_ms, stored)

    def _history_of(self, key: bytes) -> list[tuple[int, bytes]]:
        """``(time, stored bytes)`` of ``key``'s older versions, ascending, this commit's
        writes included."""
        lo, hi = fmt.history_range(key)
        try:
            found = older_versions.forward(self._history_cursor(), lo, hi)
            return older_versions.merged(found, self._pending_history.of(key))
        except Exception as exc:
            reraise(self.path, exc)

    def _history_cursor(self) -> Cursor:
        """A cursor over the committed history key space, kept until the committed data
        changes (a commit, a restored batch) or the store closes (it pins the database)."""
        found = self._cursor
        if found is None:
            found = self._cursor = cursor(self._require_open(), _HISTORY_SPACE)
        return found

    # -- the history sweep -----------------------------------------------------------

    def sweep_history(self) -> older_versions.HistorySwept:
        """Prune the next slice of keys (see the module doc); the caller commits next.

        Steps: 1. a pass that found nothing to do at this cutoff stays idle until the
        cutoff rises (a write keeps its own key pruned); 2. read up to ``max(writes since
        the last sweep, sweep_min_keys)`` newest versions from where the last sweep
        stopped, buffered writes included; 3. each key: a dead one (``key_dead``) loses
        every entry, another whose prune time has come its superseded versions, all
        through the write buffer, so the commit sends their changelog tombstones.
        """
        cutoff = self.cutoff_ms
        start = self._sweep_from
        if start is None:
            if cutoff <= self._swept_cutoff:
                self._writes = 0
                return older_versions.HistorySwept(0, 0, False)
            self._pass_cutoff, start = cutoff, fmt.LATEST_PREFIX
        budget = max(self._writes, self.sweep_min_keys)
        self._writes = 0
        with self.scan(start, _LATEST_END, limit=budget) as found:
            entries = list(found)
        deleted = sum(self._sweep_key(k, fmt.decode_latest(v), cutoff) for k, v in entries)
        more = len(entries) == budget
        if more:
            self._sweep_from = successor(entries[-1][0])
        else:
            self._sweep_from, self._swept_cutoff = None, self._pass_cutoff
        return older_versions.HistorySwept(len(entries), deleted, more)

    def _sweep_key(self, lkey: bytes, latest: fmt.Latest, cutoff_ms: int) -> int:
        """Prune one key found by the sweep; the entries deleted."""
        key = lkey[len(fmt.LATEST_PREFIX) :]
        if fmt.key_dead(latest, cutoff_ms):
            older = self._history_of(key)
            for ts, _ in older:
                self._write_history(key, ts, None)
            self.delete(lkey)
            return len(older) + 1
        if not fmt.prune_due(latest.prune_ms, cutoff_ms):
            return 0
        prune, deleted = self._prune(key, latest.ts_ms)
        self.put(lkey, fmt.encode_latest(*latest._replace(prune_ms=prune)))
        return deleted

    # -- reads ----------------------------------------------------------------------

    def get_latest(self, key: bytes) -> Version | None:
        """``key``'s newest version; None when it has none or it is a tombstone."""
        stored = self.get(fmt.latest_key(key))
        if stored is None:
            return None
        latest = fmt.decode_latest(stored)
        return None if latest.value is None else Version(latest.value, latest.ts_ms)

    def value_as_of(self, key: bytes, as_of_ms: int) -> bytes | None:
        """The value of :meth:`get_as_of` alone (None for no version), without building
        the version: a stream-table join's per-record read. When the newest version is
        valid at ``as_of_ms`` it is one read and one header unpack; as of the observed time or
        later (a stream ahead of its table), one read and its flag byte.

        Raises:
            CorruptWindowEntry: a stored newest version too short for its header.
        """
        if as_of_ms < self._read_floor:
            return None
        lkey = _LATEST + key
        read = self._read_path  # Store.get inline, as the typed views read
        stored: Any = read.buffered(lkey, _ABSENT)
        if stored is _ABSENT:
            stored = read.cached(lkey, _ABSENT)
            if stored is _ABSENT:
                stored = read.miss(lkey)
        if stored is None:
            return None
        if as_of_ms >= self.observed_ms and len(stored) >= _HEAD:
            # No version is newer than the observed time: the newest one is valid.
            return stored[_HEAD:] if stored[_FLAG] else None
        try:
            ts_ms, prune_ms, flag = _unpack_head(stored)
        except struct.error:
            fmt.decode_latest(stored)  # raises CorruptWindowEntry, naming the bytes
            raise
        if ts_ms <= as_of_ms:
            return stored[_HEAD:] if flag else None
        found = self._older_as_of(key, as_of_ms, prune_ms)
        return None if found is None else found.value

    def get_as_of(self, key: bytes, as_of_ms: int) -> Version | None:
        """The version of ``key`` valid at ``as_of_ms``: the latest written at or before
        it. None when there is none, it is a tombstone, or ``as_of_ms`` is below the
        cutoff (history no longer kept). The newest version is one point read; an older
        one adds one reverse seek over the key's history."""
        if as_of_ms < self.observed_ms - self.history_ms or as_of_ms < 0:
            return None
        stored = self.get(fmt.latest_key(key))
        if stored is None:
            return None
        latest = fmt.decode_latest(stored)
        if latest.ts_ms <= as_of_ms:
            return None if latest.value is None else Version(latest.value, latest.ts_ms)
        return self._older_as_of(key, as_of_ms, latest.prune_ms)

    def _older_as_of(self, key: bytes, as_of_ms: int, prune_ms: int) -> Version | None:
        """The older version of ``key`` valid at ``as_of_ms`` (its newest is later)."""
        if prune_ms == fmt.NO_HISTORY:
            return None
        lo = fmt.history_prefix(key)
        hi = fmt.history_bound(key, min(as_of_ms, MAX_TIME_MS - 1))
        pending = self._pending_history.of(key)
        try:
            found = older_versions.backward(self._history_cursor(), lo, hi)
            older = older_versions.newest_at_or_before(found, pending, as_of_ms)
        except Exception as exc:
            reraise(self.path, exc)
        if older is None:
            return None
        value = fmt.decode_version(older[1])
        return None if value is None else Version(value, older[0])

    def get_committed(self, key: bytes) -> bytes | None:
        """The latest committed value of ``key`` (interactive queries), any thread."""
        stored = super().get_committed(fmt.latest_key(key))
        return None if stored is None else fmt.decode_latest(stored).value

    def read_committed_range(
        self, found: KeyRange, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The latest committed values of the keys in ``found`` (interactive range
        queries: the table as it is now), tombstones left out; any thread. More chunks
        are read while tombstones fill them, as ``TtlStore.read_committed_range`` does."""
        prefix = fmt.LATEST_PREFIX
        lo = prefix + (found.lo or b"")
        hi = prefix + found.hi if found.hi is not None else prefix_upper_bound(prefix)
        window, live = KeyRange(lo, hi), []
        while True:
            chunk = super().read_committed_range(window, reverse=reverse, limit=limit)
            for key, stored in chunk:
                value = fmt.decode_latest(stored).value
                if value is not None:
                    live.append((key[len(prefix) :], value))
            if limit is None or len(chunk) < limit or len(live) >= limit:
                return live[:limit]
            last = chunk[-1][0]
            window = KeyRange(window.lo, last) if reverse else KeyRange(successor(last), window.hi)

    # -- commit and restore ------------------------------------------------------------

    def _settle(self) -> None:
        """Buffer the observed time once per commit, when it rose (as the windowed
        stores do: it changes on almost every write, the changelog needs it once)."""
        if self._observed_unwritten:
            self._observed_unwritten = False
            self.put(fmt.OBSERVED_MS, encode_meta(self.observed_ms))

    def commit(self, offsets: Mapping[tuple[str, int], int], stream_time: int = -1) -> None:
        super().commit(offsets, stream_time)
        self._pending_history.clear()  # in RocksDB now (a failed commit raised, kept them)
        self._cursor = None

    def discard_pending(self) -> None:
        """Forget the buffered writes and the observed time they carried."""
        super().discard_pending()
        self._pending_history.clear()
        self._load_observed()

    def write_restored(
        self,
        batch: RestoreBatch,
        offsets: Mapping[tuple[str, int], int],
        stream_time: int = -1,
    ) -> None:
        """:meth:`Store.write_restored`, then the observed time the changelog carried."""
        super().write_restored(batch, offsets, stream_time)
        self._cursor = None
        self._load_observed()

    def close(self) -> None:
        self._cursor = None  # first: an open cursor keeps the database open
        super().close()


if TYPE_CHECKING:  # mypy holds the store to the contract the processing layer uses
    _VERSIONED: type[RawVersionedStore] = VersionedStore
