"""Ordered scans of one store: the task's uncommitted write buffer merged with RocksDB.

Keys are compared as raw bytes (lexicographic, unsigned, a shorter key before its
extensions), which is RocksDB's default bytewise order. A user sees keys in the byte order
of their *serialised* form: see ``docs/time.md`` for what that means per serde.

Ranges are **half-open**, ``[lo, hi)``, unlike Kafka Streams' ``range(from, to)``, which
includes both ends. Half-open ranges compose: the prefix bound, RocksDB's
``iterate_upper_bound`` and ``delete_range(begin, end)`` are all exclusive at the top, and
adjacent ranges never overlap. For an inclusive top use :func:`successor`
(``[lo, successor(to))`` is ``[lo, to]``). ``lo > hi`` is an error, ``lo == hi`` is empty.

The merge (Kafka Streams shipped bugs here twice: KAFKA-4283, deleted keys reappeared;
KAFKA-18326, tombstones skipped for later keys):

1. when the scan opens, the buffered entries inside the range are copied and sorted (a
   put as bytes, a delete as ``None``, the marker ``Store._buffer`` uses);
2. RocksDB is read through one cursor, positioned with ``seek`` (forward) or
   ``seek_for_prev`` (reverse), never with ``ReadOptions.set_iterate_lower_bound``, which
   sets the *upper* bound in rocksdict 0.3.29 (checked on the installed wheel);
3. the two ordered streams are merged; on equal keys the buffer wins, and a buffered
   delete hides the stored key (and yields nothing);
4. the limit counts the pairs yielded, so deletes never use it up.

A scan sees the buffer as it was when the scan opened: writes made while iterating (a
punctuator deleting the keys it walks) are not seen by that scan, and cannot break it.
The cursor is RocksDB's own consistent view from its creation. Opening a scan costs one
pass over the buffer, which ``statestore.uncommitted.max.bytes`` bounds and each commit
empties (a sorted key list kept per store is the next step if profiles show it). Close a scan (``with``, or
:meth:`Scan.close`) before the store commits or closes: the cursor pins the database.

This module never imports rocksdict: the store creates the cursor (a rocksdict
``RdictIter``, optionally with ``set_iterate_upper_bound(range.hi)``) and hands it over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from worker.closing import Closing
from worker.errors import WorkerError


class ScanRangeError(WorkerError, ValueError):
    """A scan was asked for with bounds or a limit that make no sense (``lo > hi``, a
    negative limit, a limit over the maximum): fix the call; nothing was read."""


class Cursor(Protocol):
    """What a scan needs of a RocksDB iterator (rocksdict's ``RdictIter`` has all of it)."""

    def seek(self, key: bytes) -> None: ...
    def seek_for_prev(self, key: bytes) -> None: ...
    def seek_to_first(self) -> None: ...
    def seek_to_last(self) -> None: ...
    def valid(self) -> bool: ...
    def key(self) -> bytes: ...
    def value(self) -> bytes: ...
    def next(self) -> None: ...
    def prev(self) -> None: ...
    def status(self) -> None: ...


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Keys ``k`` with ``lo <= k < hi``; ``None`` leaves that end open."""

    lo: bytes | None = None
    hi: bytes | None = None

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, bytes)
            and (self.lo is None or key >= self.lo)
            and (self.hi is None or key < self.hi)
        )

    def below(self, cap: bytes) -> KeyRange:
        """This range cut at ``cap`` (exclusive): keeps reserved keys out of user scans."""
        hi = cap if self.hi is None else min(self.hi, cap)
        lo = self.lo if self.lo is None or self.lo <= hi else hi
        return KeyRange(lo, hi)


def _in_range(
    buffer: Mapping[bytes, bytes | None], found: KeyRange
) -> list[tuple[bytes, bytes | None]]:
    """The buffered entries with a key in ``found``: ``KeyRange.__contains__`` with the
    bounds compared inline (buffered keys are bytes), since a scan opened while the buffer
    holds a whole commit interval's writes runs this over every one of them."""
    lo, hi = found.lo, found.hi
    items = buffer.items()
    if lo is None:
        return list(items) if hi is None else [e for e in items if e[0] < hi]
    if hi is None:
        return [e for e in items if e[0] >= lo]
    return [e for e in items if lo <= e[0] < hi]


def key_range(lo: bytes | None = None, hi: bytes | None = None) -> KeyRange:
    """``[lo, hi)``, checked.

    Raises:
        ScanRangeError: ``lo > hi``, or a bound that is not bytes.
    """
    for name, bound in (("from", lo), ("to", hi)):
        if bound is not None and type(bound) is not bytes:
            raise ScanRangeError(f"scan bound {name!r} must be bytes, got {type(bound).__name__}")
    if lo is not None and hi is not None and lo > hi:
        raise ScanRangeError(f"scan from {lo!r} is after to {hi!r}")
    return KeyRange(lo, hi)


def successor(key: bytes) -> bytes:
    """The smallest key after ``key``: ``[lo, successor(to))`` includes ``to``."""
    return key + b"\x00"


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key after every key starting with ``prefix``, None if there is none.

    Increment the last byte that is not 0xFF and drop what follows it; a prefix of 0xFF
    bytes only (or empty) has no upper bound (KAFKA-20597: stores that added 1 to the
    last byte overflowed on 0xFF).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def prefix_range(prefix: bytes) -> KeyRange:
    """Every key starting with ``prefix`` (all keys for ``b""``)."""
    if type(prefix) is not bytes:
        raise ScanRangeError(f"scan prefix must be bytes, got {type(prefix).__name__}")
    return KeyRange(prefix or None, prefix_upper_bound(prefix))


def check_limit(limit: int | None, maximum: int | None = None) -> int | None:
    """``limit`` if usable: None (no limit) or ``0 <= limit <= maximum``.

    Raises:
        ScanRangeError: a negative or non-int limit, or one over ``maximum``.
    """
    if limit is None:
        return None
    if type(limit) is not int or limit < 0:
        raise ScanRangeError(f"scan limit must be an int >= 0, got {limit!r}")
    if maximum is not None and limit > maximum:
        raise ScanRangeError(f"scan limit {limit} is over the maximum {maximum}")
    return limit


class Scan(Closing):
    """An iterator of ``(key, value)`` over a range, buffer merged with RocksDB.

    A context manager: leaving the ``with`` (or :meth:`close`) releases the cursor at once,
    not at garbage collection, which matters because an open cursor keeps the database
    (and its LOCK) alive. Close is idempotent; a closed scan yields nothing more.

    Raises while iterating whatever the cursor raises (the store translates RocksDB
    errors around it) and checks the cursor's status when it runs out, since rocksdict
    ends silently on a checksum error.
    """

    def __init__(
        self,
        cursor: Cursor,
        buffer: Mapping[bytes, bytes | None],
        key_range: KeyRange,
        *,
        reverse: bool = False,
        limit: int | None = None,
        on_close: Callable[[Scan], object] | None = None,
    ) -> None:
        """Open a scan: copy the buffered entries in range, position the cursor (steps 1-2).

        ``on_close`` is called once when the scan closes (the store unregisters it).
        """
        self._range = key_range
        self._reverse = reverse
        self._remaining = check_limit(limit)
        self._on_close = on_close
        buffered = sorted(_in_range(buffer, key_range), reverse=reverse)
        self._buffered = buffered
        self._next_buffered = 0
        self._cursor: Cursor | None = cursor
        self._stored_done = False
        self._position(cursor)

    def _position(self, cursor: Cursor) -> None:
        lo, hi = self._range.lo, self._range.hi
        if not self._reverse:
            if lo is None:
                cursor.seek_to_first()
            else:
                cursor.seek(lo)
        elif hi is None:
            cursor.seek_to_last()
        else:
            cursor.seek_for_prev(hi)  # the last key <= hi; hi itself is outside
            if cursor.valid() and cursor.key() == hi:
                cursor.prev()

    def _stored_head(self) -> bytes | None:
        """The cursor's key while it is inside the range; None once it ran out or left the
        range (the cursor's status is checked then, once)."""
        if self._stored_done:
            return None
        cursor = self._cursor
        assert cursor is not None
        if cursor.valid():
            key = cursor.key()
            if self._reverse:
                if self._range.lo is None or key >= self._range.lo:
                    return key
            elif self._range.hi is None or key < self._range.hi:
                return key
        self._stored_done = True
        cursor.status()
        return None

    def _step(self) -> tuple[bytes, bytes | None] | None:
        """The next entry of the merged streams (a delete as None), or None at the end."""
        stored = self._stored_head()
        index = self._next_buffered
        buffered = self._buffered[index] if index < len(self._buffered) else None
        if buffered is None:
            if stored is None:
                return None
            return stored, self._take_stored()
        key = buffered[0]
        if stored is None or (key > stored if self._reverse else key < stored):
            self._next_buffered += 1
            return buffered
        if key == stored:  # the buffer wins; the stored value is skipped
            self._next_buffered += 1
            self._move_cursor()
            return buffered
        return stored, self._take_stored()

    def _take_stored(self) -> bytes:
        cursor = self._cursor
        assert cursor is not None
        value = cursor.value()
        self._move_cursor()
        return value

    def _move_cursor(self) -> None:
        cursor = self._cursor
        assert cursor is not None
        if self._reverse:
            cursor.prev()
        else:
            cursor.next()

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        """The next pair in key order (step 3), a buffered delete skipped (step 4)."""
        while self._remaining != 0 and self._cursor is not None:
            entry = self._step()
            if entry is None:
                break
            key, value = entry
            if value is None:
                continue
            if self._remaining is not None:
                self._remaining -= 1
            return key, value
        self.close()
        raise StopIteration

    def close(self) -> None:
        """Release the cursor now. Idempotent."""
        if self._cursor is None:
            return
        self._cursor = None  # drops the only reference: rocksdict frees the iterator
        self._buffered = []
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close(self)

    @property
    def closed(self) -> bool:
        return self._cursor is None
