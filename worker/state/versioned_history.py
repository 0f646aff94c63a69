"""A versioned store's older versions of one key: committed ones merged with this commit's;
what a history sweep did.

A store scan merges the write buffer by copying every buffered key of its range, which
means walking the whole buffer: once per as-of read into history, per pruned key and per
key the history sweep visits, that made each cost the commit interval's writes. The
versioned store therefore keeps its own writes to the history key space by key
(:class:`PendingHistory`) and reads a key's history from RocksDB alone, merged with
that key's pending writes here, through one RocksDB cursor the store keeps until its
next commit (creating one per read cost more than the read). The two always agree with a merged scan of the key's
history range (``tests/property/test_versioned_history.py``): every history write of the
store goes through both the write buffer and :meth:`PendingHistory.record`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from worker.state import versioned_format as fmt
from worker.state.scan import Cursor

_NONE: Mapping[int, bytes | None] = {}
MIN_SWEEP_KEYS = 1000  # keys one history sweep examines, at the least


@dataclass(frozen=True, slots=True)
class HistorySwept:
    """One history sweep: keys examined, entries deleted (older versions and dead keys'
    newest), and whether keys are left for the next sweep (``more``)."""

    examined: int
    deleted: int
    more: bool


class PendingHistory:
    """This commit's writes to the history key space: key -> version time -> the stored
    bytes (None: deleted). Cleared with the write buffer."""

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        self._by_key: dict[bytes, dict[int, bytes | None]] = {}

    def record(self, key: bytes, ts_ms: int, stored: bytes | None) -> None:
        self._by_key.setdefault(key, {})[ts_ms] = stored

    def of(self, key: bytes) -> Mapping[int, bytes | None]:
        return self._by_key.get(key, _NONE)

    def clear(self) -> None:
        self._by_key.clear()


def merged(
    committed: Iterable[tuple[bytes, bytes]], pending: Mapping[int, bytes | None]
) -> list[tuple[int, bytes]]:
    """``(time, stored bytes)`` of every older version, ascending: the committed history
    entries of one key with that key's pending writes over them."""
    found = {fmt.history_time(k): v for k, v in committed}
    for ts, stored in pending.items():
        if stored is None:
            found.pop(ts, None)
        else:
            found[ts] = stored
    return sorted(found.items())


def newest_at_or_before(
    committed_newest_first: Iterable[tuple[bytes, bytes]],
    pending: Mapping[int, bytes | None],
    as_of_ms: int,
) -> tuple[int, bytes] | None:
    """The older version valid at ``as_of_ms`` (the newest at or before it) and its
    stored bytes, or None. ``committed_newest_first``: the key's committed history
    entries at or before ``as_of_ms``, newest first (read lazily: usually one)."""
    best = max((ts for ts, v in pending.items() if v is not None and ts <= as_of_ms), default=-1)
    for stored_key, stored in committed_newest_first:
        ts = fmt.history_time(stored_key)
        if ts <= best:
            break
        if ts not in pending:  # pending at a time above ``best``: a delete
            return ts, stored
    return None if best < 0 else (best, cast(bytes, pending[best]))


def forward(cursor: Cursor, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The committed entries of ``[lo, hi)`` in key order, through ``cursor``."""
    cursor.seek(lo)
    while cursor.valid():
        key = cursor.key()
        if key >= hi:
            return
        yield key, cursor.value()
        cursor.next()
    cursor.status()


def backward(cursor: Cursor, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The committed entries of ``[lo, hi)`` newest (highest key) first."""
    cursor.seek_for_prev(hi)
    if cursor.valid() and cursor.key() == hi:
        cursor.prev()
    while cursor.valid():
        key = cursor.key()
        if key < lo:
            return
        yield key, cursor.value()
        cursor.prev()
    cursor.status()
