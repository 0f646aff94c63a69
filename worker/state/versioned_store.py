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
written next, with changelog tombstones: the changelog is compacted like any key-value
store's, so a compacted changelog holds about what the store holds. A key never written
again keeps its last versions until it is.

**One store, one batch.** Every version, deletion and the observed time go through the
write buffer: the commit writes them with the changelog offsets in one atomic batch and
sends them to the changelog, and a restore or a standby replays the changelog's raw
records (no special restore path), then re-reads the observed time.

Owner thread only, as :class:`Store`; :meth:`VersionedStore.get_committed` (interactive
queries: the latest committed value) may run on any thread.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Self, cast

from worker.clock import MAX_TIME_MS
from worker.state import versioned_format as fmt
from worker.state.contracts import RawVersionedStore, Version
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.scan import KeyRange, prefix_upper_bound, successor
from worker.state.store import RestoreBatch, Store
from worker.state.window_format import decode_meta, encode_meta


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
    dropped_writes: int
    _observed_unwritten: bool

    @classmethod
    def open_versioned(cls, path: Path, env: RocksDBEnv, name: str, history_ms: int) -> Self:
        """:meth:`Store.open`, then the observed time read from the store.

        Raises: as :meth:`Store.open`; ValueError for a bad ``history_ms``.
        """
        history = check_history(history_ms)
        store = cast(Self, cls.open(path, env, name))
        store.history_ms = history
        store.dropped_writes = 0
        store._load_observed()
        return store

    def _load_observed(self) -> None:
        self.observed_ms = decode_meta(self.get(fmt.OBSERVED_MS), -1)
        self._observed_unwritten = False

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
            self.observed_ms = ts_ms
            self._observed_unwritten = True
        lkey = fmt.latest_key(key)
        stored = self.get(lkey)
        if stored is None:
            self.put(lkey, fmt.encode_latest(ts_ms, fmt.NO_HISTORY, value))
            return Put.LATEST
        latest = fmt.decode_latest(stored)
        if ts_ms >= latest.ts_ms:
            prune = latest.prune_ms
            if ts_ms > latest.ts_ms:
                self.put(fmt.history_key(key, latest.ts_ms), fmt.encode_version(latest.value))
                if prune == fmt.NO_HISTORY:
                    prune = latest.ts_ms if latest.value is None else ts_ms
            latest = fmt.Latest(ts_ms, prune, value)
            outcome = Put.LATEST
        else:
            self.put(fmt.history_key(key, ts_ms), fmt.encode_version(value))
            latest = latest._replace(prune_ms=min(latest.prune_ms, ts_ms))  # a lower bound
            outcome = Put.HISTORY
        if fmt.prune_due(latest.prune_ms, self.cutoff_ms):
            latest = latest._replace(prune_ms=self._prune(key, latest.ts_ms))
        self.put(lkey, fmt.encode_latest(*latest))
        return outcome

    def _prune(self, key: bytes, latest_ms: int) -> int:
        """Delete ``key``'s older versions that no read may return; its new prune time."""
        lo, hi = fmt.history_range(key)
        with self.scan(lo, hi) as found:
            versions = [(fmt.history_time(k), fmt.decode_version(v)) for k, v in found]
        doomed, prune = fmt.plan_prune(versions, latest_ms, self.cutoff_ms)
        for ts in doomed:
            self.delete(fmt.history_key(key, ts))
        return prune

    # -- reads ----------------------------------------------------------------------

    def get_latest(self, key: bytes) -> Version | None:
        """``key``'s newest version; None when it has none or it is a tombstone."""
        stored = self.get(fmt.latest_key(key))
        if stored is None:
            return None
        latest = fmt.decode_latest(stored)
        return None if latest.value is None else Version(latest.value, latest.ts_ms)

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
        if latest.prune_ms == fmt.NO_HISTORY:
            return None
        lo = fmt.history_prefix(key)
        hi = fmt.history_bound(key, min(as_of_ms, MAX_TIME_MS - 1))
        with self.scan(lo, hi, reverse=True, limit=1) as found:
            for stored_key, stored_value in found:
                value = fmt.decode_version(stored_value)
                return None if value is None else Version(value, fmt.history_time(stored_key))
        return None

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

    def pending(self) -> Mapping[bytes, bytes | None]:
        self._settle()
        return super().pending()

    def pending_times(self) -> Mapping[bytes, int]:
        self._settle()
        return super().pending_times()

    def commit(self, offsets: Mapping[tuple[str, int], int], stream_time: int = -1) -> None:
        self._settle()
        super().commit(offsets, stream_time)

    def discard_pending(self) -> None:
        """Forget the buffered writes and the observed time they carried."""
        super().discard_pending()
        self._load_observed()

    def write_restored(
        self,
        batch: RestoreBatch,
        offsets: Mapping[tuple[str, int], int],
        stream_time: int = -1,
    ) -> None:
        """:meth:`Store.write_restored`, then the observed time the changelog carried."""
        super().write_restored(batch, offsets, stream_time)
        self._load_observed()


if TYPE_CHECKING:  # mypy holds the store to the contract the processing layer uses
    _VERSIONED: type[RawVersionedStore] = VersionedStore
