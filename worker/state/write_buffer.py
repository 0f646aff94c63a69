"""A store's write buffer: the writes of the current commit interval, by key.

Processors write a store on every record, so a write must be cheap: two dict assignments
(the value, and the time of the write for its changelog record) and a running byte count,
no RocksDB call. :meth:`Store.commit` writes the whole buffer in
one batch and then clears it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final, NoReturn, Protocol

from worker.state.contracts import Lookup
from worker.state.rocksdb_errors import StoreClosedError

_ABSENT = object()  # a key not in the buffer (None there means a buffered delete)


class WriteClock(Protocol):
    """Where a write's time comes from: the task's processor context, whose ``timestamp``
    is the record (or punctuation) being processed, in ms."""

    timestamp: int


class _NoClock:
    """Before the task points the buffer at its context: 0, the producer's own clock."""

    timestamp = 0


class WriteBuffer:
    """Uncommitted writes by key (``None``: a delete), the last write of a key winning.

    ``put`` and ``delete`` are the store's own (``Store.put is`` its buffer's ``put``,
    bound at open: a write on the per-record path is one Python call). They refuse
    anything but bytes, and every write once the store is closed (:meth:`close`), with
    ``StoreClosedError``.

    ``times`` holds the time of each key's last write, read from ``clock`` (the task sets
    it to its processor context, :meth:`worker.state.store.Store.stamp_writes`): the
    changelog record of a write carries the timestamp of the record that wrote it.

    ``lookup`` is the entries' ``dict.get`` (``lookup(key, default)``), bound once: the
    dict is never replaced, only changed in place, so a caller may keep ``lookup`` for
    the buffer's whole life (``worker.state.contracts.ReadPath`` does). Owner thread only.
    """

    __slots__ = (
        "_entries",
        "_times",
        "_bytes",
        "_closed",
        "_path",
        "lookup",
        "entries",
        "times",
        "clock",
        "ranges",
    )

    def __init__(self, path: Path) -> None:
        self._entries: Final[dict[bytes, bytes | None]] = {}
        self._bytes = 0
        self._closed = False
        self._path = path
        self.lookup: Final[Lookup] = self._entries.get
        self.entries: Final[Mapping[bytes, bytes | None]] = MappingProxyType(self._entries)
        """A read-only live view of the entries, in the order their keys were first written."""
        self._times: Final[dict[bytes, int]] = {}
        self.times: Final[Mapping[bytes, int]] = MappingProxyType(self._times)
        """A read-only live view of the time (ms) of each buffered key's last write."""
        self.clock: WriteClock = _NoClock()
        self.ranges: Final[list[tuple[bytes, bytes]]] = []
        """Range deletes ``[lo, hi)`` for the next commit, applied before the entries."""

    @property
    def size_bytes(self) -> int:
        """Approximate bytes buffered (keys + values), kept up to date in O(1) per write."""
        return self._bytes

    def __len__(self) -> int:
        """Buffered entries and range deletes: zero when a commit has nothing to write."""
        return len(self._entries) + len(self.ranges)

    def put(self, key: bytes, value: bytes) -> None:
        """Buffer ``key = value`` until the next commit."""
        if type(value) is not bytes or type(key) is not bytes or self._closed:
            self._refuse(key, value)
        entries = self._entries
        old = entries.get(key, _ABSENT)
        entries[key] = value
        self._times[key] = self.clock.timestamp
        if old is _ABSENT:
            self._bytes += len(key) + len(value)
        else:
            self._bytes += len(value) - (0 if old is None else len(old))  # type: ignore[arg-type]

    def delete(self, key: bytes) -> None:
        """Buffer a delete of ``key`` until the next commit."""
        if type(key) is not bytes or self._closed:
            self._refuse(key, b"")
        entries = self._entries
        old = entries.get(key, _ABSENT)
        entries[key] = None
        self._times[key] = self.clock.timestamp
        if old is _ABSENT:
            self._bytes += len(key)
        elif old is not None:
            self._bytes -= len(old)  # type: ignore[arg-type]

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete every key in ``[lo, hi)`` at the next commit, atomically with it.

        The commit's batch applies the range before the buffered entries, so the entries
        in range buffered so far are dropped here and writes after this call survive.
        Not changelogged: windowed stores expire by time range, and their changelog
        expires by time on the broker (``window_store.py``). Until the commit, RocksDB
        still holds the range; readers of it filter by time.
        """
        if type(lo) is not bytes or type(hi) is not bytes or self._closed:
            self._refuse(lo, hi)
        entries = self._entries
        for key in [k for k in entries if lo <= k < hi]:
            old = entries.pop(key)
            del self._times[key]
            self._bytes -= len(key) + (0 if old is None else len(old))
        self.ranges.append((lo, hi))

    def _refuse(self, key: object, value: object) -> NoReturn:
        if type(value) is not bytes:
            raise TypeError(f"store values must be bytes, got {type(value).__name__}")
        if type(key) is not bytes:
            raise TypeError(f"store keys must be bytes, got {type(key).__name__}")
        raise StoreClosedError(f"store {self._path} is closed")

    def clear(self) -> None:
        """Forget every buffered write (committed, or discarded)."""
        self._entries.clear()
        self.ranges.clear()
        self._times.clear()
        self._bytes = 0

    def close(self) -> None:
        """Forget every write and refuse new ones (the store is closing). Idempotent."""
        self.clear()
        self._closed = True
