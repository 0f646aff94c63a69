"""The versioned store's bytes: where each version of a key lives, and what it holds.

Pure functions over bytes and ints; ``versioned_store.py`` applies them. Kafka Streams'
versioned store (KIP-889) keeps a key's newest version in a "latest value store" read by
one point lookup and its older versions in time segments; this layout does the same in
one RocksDB (one changelog, one atomic batch with the offsets) with two key spaces::

    latest   0x01 || key_bytes                 -> ts_be8 || prune_be8 || flag || value
    history  0x00 || esc(key_bytes) || ts_be8  -> flag || value

``flag`` is 0x01 for a value and 0x00 for a tombstone (a delete is a version too: an
as-of read between a delete and the next write must see nothing). ``esc`` is the
windowed layout's order-preserving, prefix-free escape (``window_format.escape``), so a
key's older versions are one contiguous range ordered by time. ``prune`` is the time at
which the key's oldest older version may be dropped (see :func:`prune_due`), or
:data:`NO_HISTORY`; keeping it beside the latest value lets a write decide whether its
key needs pruning without a scan. The store's observed time is the reserved key
:data:`OBSERVED_MS` (``0xFF``, after both key spaces), written in the commit's batch.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from worker.state.window_format import (
    CorruptWindowEntry,
    be8,
    escape,
    meta_key,
)

_BE8 = struct.Struct(">Q")
LATEST_HEAD = struct.Struct(">QQB")  # a newest version's time, prune time and flag
HISTORY_PREFIX = b"\x00"
LATEST_PREFIX = b"\x01"
NO_HISTORY = 2**63 - 1  # the prune time of a key without older versions
OBSERVED_MS = meta_key("observed_ms")
_VALUE = b"\x01"
_TOMBSTONE = b"\x00"


class Latest(NamedTuple):
    """A key's newest version: its time, the key's prune time, and its value (None: a
    tombstone)."""

    ts_ms: int
    prune_ms: int
    value: bytes | None


def latest_key(key: bytes) -> bytes:
    return LATEST_PREFIX + key


def history_prefix(key: bytes) -> bytes:
    """Every older version of ``key`` starts with this (and no other key's does)."""
    return HISTORY_PREFIX + escape(key)


def history_key(key: bytes, ts_ms: int) -> bytes:
    return history_prefix(key) + be8(ts_ms)


def history_range(key: bytes) -> tuple[bytes, bytes]:
    """``[lo, hi)`` holding exactly ``key``'s older versions. Not a bare prefix: the
    escaped key of ``key + b"\x00..."`` starts with ``key``'s prefix too, then 0xFF,
    while a version time's first byte is at most 0x7F, so 0x80 there bounds ``key``'s
    own entries (the windowed layout's rule, ``window_format.segment_ranges``)."""
    prefix = history_prefix(key)
    return prefix, prefix + b"\x80"


def history_bound(key: bytes, as_of_ms: int) -> bytes:
    """The exclusive top of ``key``'s older versions with a time <= ``as_of_ms``."""
    return history_prefix(key) + be8(as_of_ms + 1)


def history_time(stored_key: bytes) -> int:
    """The version time of a history key (its last 8 bytes).

    Raises:
        CorruptWindowEntry: too short to hold one.
    """
    if len(stored_key) < 1 + 1 + _BE8.size:
        raise CorruptWindowEntry(f"{stored_key[:32]!r}: not a versioned history key")
    value: int = _BE8.unpack_from(stored_key, len(stored_key) - _BE8.size)[0]
    return value


def encode_latest(ts_ms: int, prune_ms: int, value: bytes | None) -> bytes:
    if value is None:
        return LATEST_HEAD.pack(ts_ms, prune_ms, 0)
    return LATEST_HEAD.pack(ts_ms, prune_ms, 1) + value


def decode_latest(stored: bytes) -> Latest:
    """Raises CorruptWindowEntry: shorter than its header."""
    if len(stored) < LATEST_HEAD.size:
        raise CorruptWindowEntry(f"{stored[:32]!r}: not a versioned latest value")
    ts, prune, flag = LATEST_HEAD.unpack_from(stored, 0)
    return Latest(ts, prune, stored[LATEST_HEAD.size :] if flag else None)


def encode_version(value: bytes | None) -> bytes:
    return _TOMBSTONE if value is None else _VALUE + value


def decode_version(stored: bytes) -> bytes | None:
    """The value of a stored older version; None for a tombstone.

    Raises:
        CorruptWindowEntry: empty bytes.
    """
    if not stored:
        raise CorruptWindowEntry("empty versioned history value")
    return stored[1:] if stored[:1] == _VALUE else None


def first_prune(versions: list[tuple[int, bytes | None]], latest_ms: int) -> int:
    """The prune time of a key whose older versions are ``versions`` (ascending time,
    None values: tombstones) and whose newest version is at ``latest_ms``: when its
    oldest older version stops mattering (:func:`prune_due`)."""
    if not versions:
        return NO_HISTORY
    oldest_ms, oldest = versions[0]
    if oldest is None:
        return oldest_ms  # a tombstone with nothing older reads as absence already
    return versions[1][0] if len(versions) > 1 else latest_ms


def prune_due(prune_ms: int, cutoff_ms: int) -> bool:
    """Whether a key with prune time ``prune_ms`` has older versions to drop at cutoff
    ``cutoff_ms`` (observed time minus history): a version whose successor starts at or
    before the cutoff answers no read that is still allowed (reads as of a time below
    the cutoff return nothing), and neither does a leading tombstone."""
    return prune_ms <= cutoff_ms


def plan_prune(
    versions: list[tuple[int, bytes | None]], latest_ms: int, cutoff_ms: int
) -> tuple[list[int], int]:
    """``(times of the older versions to delete, the key's new prune time)``.

    Drops each older version superseded at or before ``cutoff_ms``, then leading
    tombstones at or before it. ``versions`` ascending, as :func:`first_prune`.
    """
    times = [ts for ts, _ in versions]
    successors = [*times[1:], latest_ms]
    keep = [v for v, nxt in zip(versions, successors, strict=True) if nxt > cutoff_ms]
    while keep and keep[0][1] is None and keep[0][0] <= cutoff_ms:
        keep.pop(0)
    kept = {ts for ts, _ in keep}
    return [ts for ts in times if ts not in kept], first_prune(keep, latest_ms)


def key_dead(latest: Latest, cutoff_ms: int) -> bool:
    """Whether a key whose newest version is ``latest`` answers no read still allowed:
    a tombstone at or before the cutoff (and every older version, superseded by it).
    Deleting such a key entirely changes no read and no write: a write must be at or
    after the cutoff, so it becomes the newest version either way."""
    return latest.value is None and latest.ts_ms <= cutoff_ms
