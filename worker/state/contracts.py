"""The stores as the layers above them see them: the one statement of each contract.

The processing layer (the store views, the operators) sits below ``state`` in the layer
map and works on bytes through these protocols; the stores of this package satisfy them
(``Store`` the key-value one, ``TtlStore`` the TTL one, ``FixedWindowStore`` and
``SessionStore`` the windowed ones, ``VersionedStore`` and ``JoinBufferStore`` the
joins'), and mypy checks that where the task hands them over.
This module is the only part of ``state`` that ``processing`` may import
(tests/unit/test_layers.py): it imports nothing but the standard library, and holds the
value types the stores return (:class:`ReadPath`, :class:`StoredWindow`,
:class:`Version`, :class:`Buffered`).

Every store is used from its task's processing thread only (the ``committed_*`` reads of
interactive queries are not part of these contracts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

# ``dict.get``-shaped: ``lookup(key, default)``; the default when the key is not there.
Lookup = Callable[[bytes, object], object]


@dataclass(frozen=True, slots=True)
class ReadPath:
    """``Store.get`` in three calls: ``buffered(key, default)``, then ``cached(key,
    default)``, each returning ``default`` when the key is not there (a buffered or cached
    ``None`` is an answer: absent); then ``miss(key)``, a RocksDB point read that the
    cache remembers.

    Why: the typed store views read on every record, and calling ``Store.get`` would add
    a Python call per read, so a store hands them its read path and they make the three
    calls themselves.

    Contract: made once by its store when the store opens; ``Store.read_path()`` returns
    that same object every time. Its lookups stay valid for the store's whole life:
    ``buffered`` and ``cached`` are the ``lookup`` of the store's ``WriteBuffer`` and
    ``ReadCache``, each bound to a dict its owner never replaces (a ``Final`` attribute,
    changed in place only), so they always see the current buffer and cache.
    After the store closes both find nothing and ``miss`` raises ``StoreClosedError``.
    """

    buffered: Lookup
    cached: Lookup
    miss: Callable[[bytes], bytes | None]


class StoredWindow(NamedTuple):
    """One window as a windowed store holds it: the key's bytes, its bounds, the largest
    record time written to it (``max_ts_ms``: its output's timestamp) and its value's
    bytes."""

    key: bytes
    start_ms: int
    end_ms: int
    max_ts_ms: int
    value: bytes


class RawScan(Protocol):
    """A store's scan: ``(key, value)`` bytes in key order, closed by ``close`` or ``with``."""

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]: ...

    def __next__(self) -> tuple[bytes, bytes]: ...

    def close(self) -> None: ...


class RawKeyValueStore(Protocol):
    """A key-value store in bytes (``worker.state.store.Store``): reads see the task's
    uncommitted writes, which reach RocksDB and the changelog together at its commit."""

    def get(self, key: bytes) -> bytes | None: ...

    def read_path(self) -> ReadPath:
        """:meth:`get` as a :class:`ReadPath`: the same object for the store's life."""
        ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def scan(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> RawScan:
        """``[lo, hi)`` in key order, uncommitted writes included (``Store.scan``)."""
        ...

    def scan_prefix(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> RawScan: ...


class RawTtlStore(RawKeyValueStore, Protocol):
    """A key-value store whose keys expire (``worker.state.ttl_store.TtlStore``): reads
    and writes at a stream time ``now_ms``."""

    def get_at(self, key: bytes, now_ms: int) -> bytes | None: ...

    def put_at(self, key: bytes, value: bytes, write_ms: int) -> None: ...

    def remove(self, key: bytes) -> None: ...

    def scan_at(
        self,
        lo: bytes | None,
        hi: bytes | None,
        now_ms: int,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> RawScan: ...

    def scan_prefix_at(
        self, prefix: bytes, now_ms: int, *, reverse: bool = False, limit: int | None = None
    ) -> RawScan: ...


class WindowEvents(Protocol):
    """Where a windowed store reports what it drops (the task's metrics)."""

    def expiry_range(self) -> None: ...

    def expired_write(self) -> None: ...

    def restore_skipped(self, records: int) -> None: ...

    def late_record(self, partition: int | None, key: bytes | None, late_ms: int) -> None:
        """The store's windowed aggregation dropped a record (of ``partition``, with the
        serialised ``key``) as late: ``late_ms`` behind the store's observed time."""
        ...


class RawWindowedStore(Protocol):
    """What fixed-window and session stores share (``worker.state.window_store``):
    observed time, retention, and emit-final's progress."""

    @property
    def observed_ms(self) -> int:
        """The largest write time so far (-1 before any)."""
        ...

    @property
    def last_emitted_close(self) -> int | None:
        """Emit-final's close bound: every window closed below it was emitted (None: no
        emission yet)."""
        ...

    @property
    def events(self) -> WindowEvents: ...

    def advance(self, time_ms: int) -> None:
        """Raise the observed time to ``time_ms`` (never lowers it)."""
        ...

    def mark_emitted(self, close_bound: int) -> None:
        """Every window closed below ``close_bound`` has had its final result forwarded."""
        ...


class RawWindowStore(RawWindowedStore, Protocol):
    """Tumbling and hopping windows in bytes (``FixedWindowStore``). ``window_key``,
    ``split_stored``, ``stored_window`` and ``put_stored`` let an operator do its own
    read-modify-write of a window with the key made once."""

    def put_window(
        self,
        key: bytes,
        start_ms: int,
        value: bytes | None,
        timestamp_ms: int,
        *,
        max_ts_ms: int | None = None,
    ) -> bool: ...

    def get_window(self, key: bytes, start_ms: int) -> StoredWindow | None: ...

    def fetch_windows(self, key: bytes, from_ms: int, to_ms: int) -> Iterable[StoredWindow]: ...

    def fetch_all_windows(
        self, from_ms: int, to_ms: int, *, live_only: bool = True
    ) -> Iterator[StoredWindow]: ...

    def window_key(self, start_ms: int, key: bytes) -> bytes: ...

    def split_stored(self, stored: bytes) -> tuple[int, bytes]: ...

    def stored_window(self, stored_key: bytes, start_ms: int) -> bytes | None: ...

    def put_stored(
        self, stored_key: bytes, start_ms: int, max_ts_ms: int, value: bytes, timestamp_ms: int
    ) -> bool: ...


class RawSessionStore(RawWindowedStore, Protocol):
    """Session-shaped windows in bytes (``SessionStore``): sessions, and the sliding
    windows of aggregations, told apart by both bounds."""

    def put_session(
        self,
        key: bytes,
        start_ms: int,
        end_ms: int,
        value: bytes,
        timestamp_ms: int,
        *,
        max_ts_ms: int | None = None,
    ) -> bool: ...

    def remove_session(self, key: bytes, start_ms: int, end_ms: int) -> None: ...

    def find_sessions(
        self, key: bytes, earliest_end_ms: int, latest_start_ms: int, *, live_only: bool = True
    ) -> Iterable[StoredWindow]: ...

    def fetch_all_sessions(
        self, end_from_ms: int, end_to_ms: int, *, live_only: bool = True
    ) -> Iterator[StoredWindow]: ...


class Version(NamedTuple):
    """A versioned store's value and the time from which it is valid (its write's)."""

    value: bytes
    valid_from_ms: int


class RawVersionedStore(Protocol):
    """Versions of keys in bytes (``worker.state.versioned_store.VersionedStore``).
    ``put_version`` returns what the write did: ``"latest"``, ``"history"`` or
    ``"rejected"`` (older than the history allows)."""

    @property
    def observed_ms(self) -> int: ...

    @property
    def history_ms(self) -> int: ...

    def put_version(self, key: bytes, value: bytes | None, ts_ms: int) -> str: ...

    def get_latest(self, key: bytes) -> Version | None: ...

    def get_as_of(self, key: bytes, as_of_ms: int) -> Version | None: ...

    def value_as_of(self, key: bytes, as_of_ms: int) -> bytes | None: ...


class Buffered(NamedTuple):
    """One record of a stream-stream join's buffer: its time, its number in the store
    (arrival order), its value's bytes."""

    ts_ms: int
    seq: int
    value: bytes


class RawJoinBuffer(Protocol):
    """One side of a stream-stream join in bytes (``worker.state.join_buffer``)."""

    @property
    def observed_ms(self) -> int: ...

    @property
    def events(self) -> WindowEvents: ...

    def append(self, key: bytes, ts_ms: int, value: bytes) -> int | None: ...

    def fetch(self, key: bytes, from_ms: int, to_ms: int) -> Sequence[Buffered]: ...
