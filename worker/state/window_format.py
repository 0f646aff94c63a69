"""The windowed store's bytes: key and value layouts, reserved keys, expiry and scan ranges.

Pure functions over bytes and ints; the store applies them (write buffer, scans, the
commit's atomic batch). One RocksDB per store per task, raw mode, one column family, as
every store (design: ``../shared/docs/reference/time-and-windows.md`` §6.4-§6.5).

**Fixed windows (tumbling, hopping): time first.** ::

    key   = start_be8 || key_bytes
    value = max_ts_be8 || agg_bytes

``be8`` is 8 bytes big-endian unsigned; times are >= 0 and < 2**63, so the bytes sort as
the numbers and the first byte is at most 0x7F. Byte order is ``(start, key_bytes)``
order: emit-final walks ``[last emitted, close bound)`` in one ordered scan, a time range
over all keys is one contiguous range, and expiry of everything older is one
``delete_range``. A key's windows over a time range are point reads of the aligned starts
(:func:`fixed_fetch_keys`). ``max_ts`` is the largest record time in the window, the
timestamp of its output (Kafka's rule for aggregates).

**Sliding and session windows: key first inside time segments.** ::

    key = seg_be8 || esc(key_bytes) || end_be8 || start_be8      seg = end // segment

A key's windows in a segment are contiguous and ordered by end, so finding a key's
sessions is one seek per live segment; whole segments expire by ``delete_range``.
``esc`` is FoundationDB's tuple encoding of byte strings (``0x00`` becomes ``0x00 0xFF``,
then a ``0x00`` terminator). It preserves order, and it is prefix-free where it matters:
the byte after the terminator is the first byte of a time (at most 0x7F), never the 0xFF
that continues an escaped ``0x00``, so the entries of one key are contiguous and a key's
range never takes in a longer key's entries (Kafka needed ``OrderedBytes`` over-scans and
a filter for that). Values are as for fixed windows.

**Reserved keys** ``0xFF || name`` (:func:`meta_key`) hold the store's progress, written in
the same batch as the data and changelogged like it: :data:`OBSERVED_MS` (the operator's
observed time), :data:`LAST_EMITTED_CLOSE` (emit-final's exclusive bound: every window
whose start, or end for sliding and session windows, is below it was emitted),
:data:`EXPIRED_UPTO` (what expiry has deleted). They sort after every window key and no
expiry range reaches them.

**Expiry** (:func:`plan_expiry`): cutoff ``min(observed - retention, last_emitted_close)``,
so no window leaves before its final result is out; applied in steps of
:func:`segment_interval` so the range tombstones stay few; no changelog tombstones (the
changelog is ``compact,delete`` with time retention, as in Kafka Streams).

All ranges are half-open ``[lo, hi)`` :class:`~worker.state.scan.KeyRange` values, as
scans and ``delete_range`` take them. Time arguments of the fetch helpers are inclusive
at both ends, as Kafka Streams' ``fetch(key, from, to)``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from worker.clock import MAX_TIME_MS
from worker.errors import WorkerError
from worker.state.scan import KeyRange
from worker.state.ttl import RESERVED_PREFIX

_BE8 = struct.Struct(">Q")
_PACK = _BE8.pack
_WIDTH = _BE8.size
MIN_SEGMENT_INTERVAL_MS = 60_000  # Kafka Streams' floor for segment intervals
ESCAPE = b"\x00\xff"
TERMINATOR = b"\x00"


class CorruptWindowEntry(WorkerError, ValueError):
    """Stored bytes that do not have the windowed layout: treat as corruption of the store."""


def meta_key(name: str) -> bytes:
    """A reserved key of the store: after every window key, never expired."""
    return RESERVED_PREFIX + name.encode()


OBSERVED_MS = meta_key("observed_ms")
LAST_EMITTED_CLOSE = meta_key("last_emitted_close")
EXPIRED_UPTO = meta_key("expired_upto")


def be8(ms: int) -> bytes:
    """``ms`` as 8 big-endian bytes.

    Raises:
        ValueError: below 0 or above :data:`MAX_TIME_MS`.
    """
    if not 0 <= ms <= MAX_TIME_MS:
        raise ValueError(f"time {ms} is outside [0, {MAX_TIME_MS}]")
    return _BE8.pack(ms)


def _be8_or_floor(ms: int) -> bytes:
    """:func:`be8` with times below 0 clamped at 0 (range bounds computed as ``t - x``)."""
    return be8(min(max(ms, 0), MAX_TIME_MS))


def _read_be8(data: bytes, offset: int) -> int:
    if len(data) < offset + _WIDTH:
        raise CorruptWindowEntry(f"{data[:32]!r}: 8 bytes of time expected at {offset}")
    value: int = _BE8.unpack_from(data, offset)[0]
    return value


def is_meta_key(stored_key: bytes) -> bool:
    """True for the store's reserved keys: never expired, never filtered by time."""
    return stored_key.startswith(RESERVED_PREFIX)


def encode_meta(value: int) -> bytes:
    """A reserved key's value: a time as 8 bytes."""
    return be8(value)


def decode_meta(stored: bytes | None, default: int) -> int:
    """A reserved key's value, ``default`` when the store has none yet."""
    return default if stored is None else _read_be8(stored, 0)


# -- values --------------------------------------------------------------------------


def encode_value(max_ts_ms: int, aggregate: bytes) -> bytes:
    if 0 <= max_ts_ms <= MAX_TIME_MS:  # be8's check inline: this runs per window write
        return _PACK(max_ts_ms) + aggregate
    return be8(max_ts_ms) + aggregate  # raises


def decode_value(stored: bytes) -> tuple[int, bytes]:
    """``(max_ts, aggregate bytes)``."""
    return _read_be8(stored, 0), stored[_WIDTH:]


# -- fixed windows: start || key -------------------------------------------------------


def fixed_key(start_ms: int, key: bytes) -> bytes:
    if 0 <= start_ms <= MAX_TIME_MS:  # be8's check inline, as encode_value
        return _PACK(start_ms) + key
    return be8(start_ms) + key  # raises


def decode_fixed_key(stored_key: bytes) -> tuple[int, bytes]:
    """``(start, key bytes)``."""
    return _read_be8(stored_key, 0), stored_key[_WIDTH:]


def fixed_fetch_keys(key: bytes, from_ms: int, to_ms: int, advance_ms: int) -> Iterator[bytes]:
    """The stored keys of ``key``'s windows starting in ``[from_ms, to_ms]`` (aligned on
    ``advance_ms``), ascending: read them with a multi-get. Lazy: the caller bounds how
    many it takes (span / advance of them)."""
    first = max(0, -(-from_ms // advance_ms) * advance_ms)
    for start in range(first, min(to_ms, MAX_TIME_MS) + 1, advance_ms):
        yield fixed_key(start, key)


def fixed_time_range(from_ms: int, to_ms: int) -> KeyRange:
    """Every key's windows starting in ``[from_ms, to_ms]`` (``fetch_all``); empty when
    ``to_ms < from_ms`` (the store refuses such user bounds first, ``ScanRangeError``)."""
    if to_ms < from_ms:
        return KeyRange(_be8_or_floor(from_ms), _be8_or_floor(from_ms))
    return KeyRange(_be8_or_floor(from_ms), _upper(to_ms))


def emit_range(last_emitted_close: int, close_bound: int) -> KeyRange | None:
    """What emit-final reads: the times in ``[last_emitted_close, close_bound)`` (starts of
    fixed windows; for sliding and session windows use :func:`segment_span` over ends),
    None when nothing new closed. ``close_bound`` is the definition's ``close_bound(t)``;
    after emitting, store ``close_bound`` as :data:`LAST_EMITTED_CLOSE`."""
    lo = max(last_emitted_close, 0)
    if close_bound <= lo:
        return None
    return KeyRange(be8(lo), _be8_or_floor(close_bound))


def _upper(inclusive_ms: int) -> bytes:
    """The exclusive byte bound just above time ``inclusive_ms`` (for the last time, the
    reserved keys' prefix: above every time, below every reserved key)."""
    if inclusive_ms >= MAX_TIME_MS:
        return RESERVED_PREFIX  # below the reserved keys, above every time
    return _be8_or_floor(inclusive_ms + 1)


# -- sliding and session windows: seg || esc(key) || end || start ----------------------


def escape(key: bytes) -> bytes:
    """FoundationDB's byte-string encoding: ``0x00`` -> ``0x00 0xFF``, then ``0x00``."""
    return key.replace(b"\x00", ESCAPE) + TERMINATOR


def unescape(data: bytes, offset: int = 0) -> tuple[bytes, int]:
    """``(key, offset just past its terminator)`` of an escaped key at ``offset``.

    Raises:
        CorruptWindowEntry: no terminator.
    """
    parts = []
    position = offset
    while True:
        zero = data.find(b"\x00", position)
        if zero < 0:
            raise CorruptWindowEntry(f"{data[:32]!r}: escaped key without its terminator")
        parts.append(data[position:zero])
        if data[zero + 1 : zero + 2] == b"\xff":
            parts.append(b"\x00")
            position = zero + 2
            continue
        return b"".join(parts), zero + 1


def segment_interval(retention_ms: int) -> int:
    """Kafka Streams' default: half the retention, at least a minute. Expiry works in
    steps of it, so a store holds at most about ``retention + interval`` of windows."""
    return max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)


def segmented_key(key: bytes, start_ms: int, end_ms: int, interval_ms: int) -> bytes:
    return be8(end_ms // interval_ms) + escape(key) + be8(end_ms) + be8(start_ms)


def decode_segmented_key(stored_key: bytes) -> tuple[bytes, int, int]:
    """``(key bytes, start, end)``.

    Raises:
        CorruptWindowEntry: not the layout (truncated, or bytes after the start).
    """
    key, offset = unescape(stored_key, _WIDTH)
    end = _read_be8(stored_key, offset)
    start = _read_be8(stored_key, offset + _WIDTH)
    if len(stored_key) != offset + 2 * _WIDTH:
        raise CorruptWindowEntry(f"{stored_key[:32]!r}: bytes after the window start")
    return key, start, end


def segment_ranges(
    key: bytes, end_from_ms: int, end_to_ms: int, interval_ms: int
) -> list[KeyRange]:
    """The ranges holding ``key``'s windows with an end in ``[end_from_ms, end_to_ms]``:
    one per segment, in time order.

    Sessions a record at ``ts`` may join: ends in ``[ts - gap, observed]`` (no session
    ends after the observed time), then keep starts ``<= ts + gap``. Windows containing
    ``ts`` for sliding windows: ends in ``[ts, ts + d]``. IQ ``fetch(key, from, to)`` by
    start: ends in ``[from, to + span]`` for sliding windows, then filter on the start.
    """
    if end_to_ms < end_from_ms or end_to_ms < 0:
        return []
    lo_end = max(end_from_ms, 0)
    escaped = escape(key)
    # The byte after a key's terminator is the first byte of its end time (<= 0x7F), so
    # a bound of 0x80 there is above every entry of this key and below every entry of a
    # longer key continuing with an escaped 0x00 (0x00 0xFF).
    hi_end = b"\x80" if end_to_ms >= MAX_TIME_MS else be8(end_to_ms + 1)
    ranges = []
    for segment in range(lo_end // interval_ms, min(end_to_ms, MAX_TIME_MS) // interval_ms + 1):
        head = be8(segment) + escaped
        ranges.append(KeyRange(head + be8(lo_end), head + hi_end))
    return ranges


def segment_span(end_from_ms: int, end_to_ms: int, interval_ms: int) -> KeyRange | None:
    """Every key's windows in the segments holding ends ``[end_from_ms, end_to_ms]``:
    ``fetch_all`` and emit-final for sliding and session windows, whose scans keep only
    the entries with an end in range (a segment is ordered by key, then end). None when
    empty."""
    if end_to_ms < end_from_ms or end_to_ms < 0:
        return None
    first = max(end_from_ms, 0) // interval_ms
    last = min(end_to_ms, MAX_TIME_MS) // interval_ms
    return KeyRange(be8(first), be8(last + 1))


# -- expiry -----------------------------------------------------------------------------


def expiry_cutoff(observed_ms: int, retention_ms: int, last_emitted_close: int | None) -> int:
    """The time below which windows may go (start for fixed windows, end for sliding and
    session windows): ``min(observed - retention, last_emitted_close)``. Emit-final stores
    pass their marker, so a window never leaves before it is emitted; emit-on-update stores
    pass None."""
    cutoff = observed_ms - retention_ms
    return cutoff if last_emitted_close is None else min(cutoff, last_emitted_close)


@dataclass(frozen=True, slots=True)
class ExpiryPlan:
    """Delete ``range`` in the commit's batch and store ``expired_upto`` (under
    :data:`EXPIRED_UPTO`) in the same batch."""

    range: KeyRange
    expired_upto: int


def plan_expiry(
    cutoff_ms: int, expired_upto: int, interval_ms: int, *, segmented: bool
) -> ExpiryPlan | None:
    """The range to delete for ``cutoff_ms`` (:func:`expiry_cutoff`), or None when it
    gains no whole step over ``expired_upto`` (the time below which all is gone, 0 at
    first).

    Steps of ``interval_ms`` keep the range tombstones to one per interval of stream time
    (thousands of them slowed RocksDB reads down; rocksdb PR #4014). Fixed windows delete
    starts below the step; segmented layouts delete whole segments below it, so the keys
    of a partly expired segment stay until the next step (reads filter them by time).
    Each range starts at the first key: it also takes anything a restore wrote below.
    """
    upto = cutoff_ms // interval_ms * interval_ms
    if upto <= expired_upto or upto <= 0:
        return None
    hi = be8(upto // interval_ms) if segmented else be8(upto)
    return ExpiryPlan(KeyRange(b"", hi), upto)


def entry_time(stored_key: bytes, *, segmented: bool) -> int:
    """The time retention is judged by: a fixed window's start, a sliding or session
    window's end. Restores and standbys skip entries with :func:`is_expired` times
    (reserved keys aside, :func:`is_meta_key`).

    Raises:
        CorruptWindowEntry: not the layout.
    """
    if segmented:
        return decode_segmented_key(stored_key)[2]
    return _read_be8(stored_key, 0)


def is_expired(time_ms: int, observed_ms: int, retention_ms: int) -> bool:
    """The read filter: a window whose time (start, or end for segmented layouts) is below
    ``observed - retention`` reads as absent, even while still on disk (KAFKA-12960);
    a restore skips such records too."""
    return time_ms < observed_ms - retention_ms


def progress_floor(records: Iterable[tuple[bytes, bytes | None]]) -> tuple[int, int | None]:
    """``(observed time, emit progress)``: the largest :data:`OBSERVED_MS` and
    :data:`LAST_EMITTED_CLOSE` among changelog ``records`` (-1 and None when absent).

    Both only rise, so any record of them the changelog holds bounds from below what a
    restore reading it to the end ends with, and so does the expiry cutoff they give.
    """
    observed, emitted = -1, None
    for key, value in records:
        if value is None:
            continue
        if key == OBSERVED_MS:
            observed = max(observed, decode_meta(value, -1))
        elif key == LAST_EMITTED_CLOSE:
            emitted = max(emitted or 0, decode_meta(value, 0))
    return observed, emitted
