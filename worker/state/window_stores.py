"""Window and session operations over a :class:`~worker.state.window_store.WindowedStore`.

Bytes in, bytes out: keys and values as the serdes made them; the processor views
(``worker/processing/window_views.py``) and the windowed aggregations encode and decode.
Every write takes the time it happens at (``timestamp_ms``: the record's timestamp, or
emit-final's stream time), which advances the store's observed time before the write is
judged, so retention follows what the store was written with.

Times of ``fetch``-style reads are inclusive at both ends (Kafka Streams' convention for
window times); ``from_ms > to_ms`` raises :class:`~worker.state.scan.ScanRangeError`.
Reads skip expired windows (``live_only``); emit-final passes ``live_only=False`` to read
closed windows that the cutoff still holds for it.

Owner thread only, except the ``committed_*`` methods (interactive queries): those read
committed data under the store's close lock, from any thread, and raise
``StoreClosedError`` once the store is closed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from worker.clock import MAX_TIME_MS
from worker.state.contracts import RawSessionStore, RawWindowStore, StoredWindow
from worker.state.store import RestoreBatch
from worker.state.ttl import RESERVED_PREFIX
from worker.state.window_format import (
    decode_fixed_key,
    decode_segmented_key,
    decode_value,
    encode_value,
    fixed_fetch_keys,
    fixed_key,
    fixed_time_range,
    segment_ranges,
    segment_span,
    segmented_key,
)
from worker.state.window_store import WindowedStore, check_times

__all__ = ["FixedWindowStore", "SessionStore", "StoredWindow"]

_ABSENT = object()  # a key the buffer (or the read cache) does not hold
_ABOVE_WINDOWS = b"\x80"  # above every fixed window's key (a time's first byte is <= 0x7F)


class FixedWindowStore(WindowedStore):
    """Tumbling and hopping windows ``[start, start + size)``, keyed ``start || key``.

    Keeps ``_disk_below``, a bound on the starts RocksDB holds (every window on disk
    starts below it): the newest window start on disk when the store opens, raised by each
    commit and restored batch. A window starting at or after it is not on disk, so
    :meth:`stored_window` reads it from the buffer alone: the first record of every new
    window, most of a window's reads at a high key count, costs no RocksDB read.
    """

    _disk_below: int

    def _load_progress(self) -> None:
        super()._load_progress()
        self._disk_below = self._newest_start_on_disk() + 1

    def _newest_start_on_disk(self) -> int:
        """The largest window start RocksDB holds (-1: none); one seek backwards."""
        cursor = self._require_open().iter()
        cursor.seek_for_prev(_ABOVE_WINDOWS)
        newest = decode_fixed_key(cursor.key())[0] if cursor.valid() else -1
        del cursor  # releases the RocksDB iterator now, before a commit could wait on it
        return newest

    def commit(self, offsets: Mapping[tuple[str, int], int], stream_time: int = -1) -> None:
        """:meth:`Store.commit`, the bound on the starts on disk raised first (a failed
        write leaves it too high: reads then look on disk for nothing, never the reverse)."""
        newest = max(filter(_ABOVE_WINDOWS.__gt__, self.pending()), default=None)
        if newest is not None:
            self._disk_below = max(self._disk_below, decode_fixed_key(newest)[0] + 1)
        super().commit(offsets, stream_time)

    def write_restored(
        self, batch: RestoreBatch, offsets: Mapping[tuple[str, int], int], stream_time: int = -1
    ) -> None:
        super().write_restored(batch, offsets, stream_time)
        self._disk_below = max(self._disk_below, self._newest_start_on_disk() + 1)

    def _window(self, key: bytes, start_ms: int, stored: bytes) -> StoredWindow:
        max_ts, value = decode_value(stored)
        return StoredWindow(key, start_ms, start_ms + self.layout.size_ms, max_ts, value)

    def put_window(
        self,
        key: bytes,
        start_ms: int,
        value: bytes | None,
        timestamp_ms: int,
        *,
        max_ts_ms: int | None = None,
    ) -> bool:
        """Write (``None``: delete) the window of ``key`` starting at ``start_ms`` at time
        ``timestamp_ms``; ``max_ts_ms`` (default ``timestamp_ms``) is stored as the
        window's largest record time. False when the window has expired: the write is
        dropped and counted.

        Raises:
            ValueError: ``start_ms`` is not a window start (a multiple of the advance, >= 0).
        """
        if start_ms < 0 or start_ms % self.layout.advance_ms:
            raise ValueError(
                f"store {self.name!r}: {start_ms} is not a window start "
                f"(a multiple of advance_ms {self.layout.advance_ms})"
            )
        stored_key = fixed_key(start_ms, key)
        if value is None:
            self.advance(timestamp_ms)
            if start_ms < self.live_from:
                return self._dropped()
            self.delete(stored_key)
            return True
        max_ts = timestamp_ms if max_ts_ms is None else max_ts_ms
        return self.put_stored(stored_key, start_ms, max_ts, value, timestamp_ms)

    # The layout's functions, for an operator doing its own read-modify-write
    # (:meth:`stored_window`, then :meth:`put_stored`) without importing the state layer.
    window_key = staticmethod(fixed_key)
    split_stored = staticmethod(decode_value)

    def put_stored(
        self, stored_key: bytes, start_ms: int, max_ts_ms: int, value: bytes, timestamp_ms: int
    ) -> bool:
        """:meth:`put_window` with the key made by the caller: ``stored_key`` is
        ``window_key(start_ms, key)`` and ``start_ms`` a window start (not checked here)."""
        if timestamp_ms > self.observed_ms:
            self.advance(timestamp_ms)
        if start_ms < self.live_from:
            return self._dropped()
        self.put(stored_key, encode_value(max_ts_ms, value))
        return True

    def stored_window(self, stored_key: bytes, start_ms: int) -> bytes | None:
        """The stored bytes (``max_ts || value``) under ``stored_key`` (the window of
        ``start_ms``), uncommitted writes included, for a read-modify-write of a live
        window (the caller checks liveness).

        Unlike :meth:`get_window`, what comes from RocksDB (mostly nothing: a new window)
        is not kept in the read cache: the write that follows replaces it in the buffer
        and the commit caches what it wrote, so remembering it would only churn the
        cache, which a window store's ever-new keys otherwise trim over and over."""
        read = self._read_path
        stored = read.buffered(stored_key, _ABSENT)
        if stored is _ABSENT:
            if start_ms >= self._disk_below:
                return None  # newer than every window on disk (and so in the cache)
            stored = read.cached(stored_key, _ABSENT)
            if stored is _ABSENT:
                return self._read_committed(stored_key)
        return stored  # type: ignore[return-value]

    def get_window(self, key: bytes, start_ms: int) -> StoredWindow | None:
        """The window of ``key`` starting at ``start_ms``, uncommitted writes included."""
        if start_ms < max(self.live_from, 0) or start_ms > MAX_TIME_MS:
            return None
        stored = self.get(fixed_key(start_ms, key))
        return None if stored is None else self._window(key, start_ms, stored)

    def fetch_windows(self, key: bytes, from_ms: int, to_ms: int) -> list[StoredWindow]:
        """``key``'s windows starting in ``[from_ms, to_ms]``, by start: point reads of the
        aligned starts between the live bound and the observed time."""
        check_times(from_ms, to_ms)
        found: list[StoredWindow] = []
        lo, hi = max(from_ms, self.live_from), min(to_ms, self.observed_ms)
        if lo > hi:
            return found
        for stored_key in fixed_fetch_keys(key, lo, hi, self.layout.advance_ms):
            stored = self.get(stored_key)
            if stored is not None:
                found.append(self._window(key, decode_fixed_key(stored_key)[0], stored))
        return found

    def fetch_all_windows(
        self, from_ms: int, to_ms: int, *, live_only: bool = True
    ) -> Iterator[StoredWindow]:
        """Every key's windows starting in ``[from_ms, to_ms]``, by start then key: one
        ordered scan. A generator holding a RocksDB cursor: exhaust or close it before
        the next commit."""
        check_times(from_ms, to_ms)
        lo = max(from_ms, self.live_from) if live_only else from_ms
        with self._scan(fixed_time_range(lo, to_ms)) as scan:
            for stored_key, stored in scan:
                start, key = decode_fixed_key(stored_key)
                yield self._window(key, start, stored)

    def committed_windows(
        self, key: bytes | None, from_ms: int, to_ms: int, limit: int | None
    ) -> tuple[int, list[StoredWindow]]:
        """``(observed time, windows)`` as committed: ``key``'s windows starting in
        ``[from_ms, to_ms]`` (every key's when ``key`` is None), live ones only, at most
        ``limit``. Any thread."""
        with self._committed_read():
            observed, lo = self._committed_bounds(from_ms, to_ms, limit)
            found: list[StoredWindow] = []
            if lo > to_ms or limit == 0:
                return observed, found
            if key is not None:
                hi = min(to_ms, max(observed, 0))
                for stored_key in fixed_fetch_keys(key, lo, hi, self.layout.advance_ms):
                    stored = self._read_committed(stored_key)
                    if stored is not None:
                        found.append(self._window(key, decode_fixed_key(stored_key)[0], stored))
                        if len(found) == limit:
                            break
                return observed, found
            with self._committed_scan(fixed_time_range(lo, to_ms)) as scan:
                for stored_key, stored in scan:
                    start, each = decode_fixed_key(stored_key)
                    found.append(self._window(each, start, stored))
                    if len(found) == limit:
                        break
            return observed, found


class SessionStore(WindowedStore):
    """Sessions ``[start, end]`` (both included), keyed ``seg || key || end || start``
    and judged by their end; also the store of sliding windows, which have the same
    shape. A window cannot end more than ``layout.max_ahead_ms`` after the observed time
    (a session's end is its last record's time, at most the latest write), which bounds
    every search."""

    @property
    def _latest_end(self) -> int:
        return self.observed_ms + self.layout.max_ahead_ms

    def _session(self, stored_key: bytes, stored: bytes) -> StoredWindow:
        key, start, end = decode_segmented_key(stored_key)
        max_ts, value = decode_value(stored)
        return StoredWindow(key, start, end, max_ts, value)

    def _stored_key(self, key: bytes, start_ms: int, end_ms: int) -> bytes:
        if not 0 <= start_ms <= end_ms:
            raise ValueError(f"store {self.name!r}: session [{start_ms}, {end_ms}] is not a range")
        return segmented_key(key, start_ms, end_ms, self.layout.interval_ms)

    def put_session(
        self,
        key: bytes,
        start_ms: int,
        end_ms: int,
        value: bytes,
        timestamp_ms: int,
        *,
        max_ts_ms: int | None = None,
    ) -> bool:
        """Write ``key``'s session ``[start_ms, end_ms]`` at time ``timestamp_ms``
        (``max_ts_ms`` defaults to ``end_ms``). False when it has expired (dropped,
        counted).

        Raises:
            ValueError: ``start_ms > end_ms``, a negative start, or an end more than
                ``layout.max_ahead_ms`` after the observed time.
        """
        stored_key = self._stored_key(key, start_ms, end_ms)
        self.advance(timestamp_ms)
        if end_ms > self._latest_end:
            raise ValueError(
                f"store {self.name!r}: session end {end_ms} is after the latest write time "
                f"{self.observed_ms} + {self.layout.max_ahead_ms} (write a session at its "
                "last record's time)"
            )
        if end_ms < self.live_from:
            return self._dropped()
        self.put(stored_key, encode_value(end_ms if max_ts_ms is None else max_ts_ms, value))
        return True

    def remove_session(self, key: bytes, start_ms: int, end_ms: int) -> None:
        """Delete ``key``'s session ``[start_ms, end_ms]`` (a merge absorbed it)."""
        self.delete(self._stored_key(key, start_ms, end_ms))

    def find_sessions(
        self, key: bytes, earliest_end_ms: int, latest_start_ms: int, *, live_only: bool = True
    ) -> list[StoredWindow]:
        """``key``'s sessions ending at or after ``earliest_end_ms`` and starting at or
        before ``latest_start_ms`` (Kafka's ``findSessions``), by end: one seek per
        segment, uncommitted writes included."""
        lo = max(earliest_end_ms, self.live_from) if live_only else earliest_end_ms
        found = []
        for found_range in segment_ranges(key, lo, self._latest_end, self.layout.interval_ms):
            with self._scan(found_range) as scan:
                for stored_key, stored in scan:
                    session = self._session(stored_key, stored)
                    if session.start_ms <= latest_start_ms:
                        found.append(session)
        return found

    def fetch_all_sessions(
        self, end_from_ms: int, end_to_ms: int, *, live_only: bool = True
    ) -> Iterator[StoredWindow]:
        """Every key's sessions ending in ``[end_from_ms, end_to_ms]``, by segment of
        their end, then key, then end (not globally by time). A generator holding a
        RocksDB cursor: exhaust or close it before the next commit."""
        check_times(end_from_ms, end_to_ms)
        lo = max(end_from_ms, self.live_from) if live_only else end_from_ms
        span = segment_span(lo, end_to_ms, self.layout.interval_ms)
        if span is None:
            return
        with self._scan(span.below(RESERVED_PREFIX)) as scan:
            for stored_key, stored in scan:
                session = self._session(stored_key, stored)
                if lo <= session.end_ms <= end_to_ms:
                    yield session

    def committed_sessions(
        self, key: bytes, from_ms: int, to_ms: int, limit: int | None
    ) -> tuple[int, list[StoredWindow]]:
        """``(observed time, sessions)`` as committed: ``key``'s live sessions ending at
        or after ``from_ms`` and starting at or before ``to_ms``, by end, at most
        ``limit``. Any thread."""
        with self._committed_read():
            observed, lo = self._committed_bounds(from_ms, to_ms, limit)
            found: list[StoredWindow] = []
            latest_end = observed + self.layout.max_ahead_ms
            ranges = segment_ranges(key, lo, latest_end, self.layout.interval_ms)
            for found_range in [] if limit == 0 else ranges:
                with self._committed_scan(found_range) as scan:
                    for stored_key, stored in scan:
                        session = self._session(stored_key, stored)
                        if session.start_ms <= to_ms:
                            found.append(session)
                            if len(found) == limit:
                                return observed, found
            return observed, found


if TYPE_CHECKING:  # mypy holds the stores to the contracts the processing layer uses
    _FIXED: type[RawWindowStore] = FixedWindowStore
    _SESSIONS: type[RawSessionStore] = SessionStore
