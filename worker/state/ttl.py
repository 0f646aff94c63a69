"""Per-key TTL for key-value stores: the stored shape, the expiry index, the sweep plan.

Pure functions over bytes; the store applies them (reads, write buffer, commit batch).

Clock: **stream time**, never the wall clock. A key written at record time ``ts`` with
``ttl_ms`` expires at ``ts + ttl_ms`` and reads as absent once the task's stream time
reaches that instant. Why:

- replays give the same answer: reprocessing after a crash, a restore or a standby
  applying the changelog expire exactly the keys the first run expired, so exactly-once
  output does not depend on when it ran, and a standby's store equals its active's;
- a backfill of old data behaves as it did live, instead of expiring everything at once
  (or nothing);
- it is the clock windows and stream-time punctuators already use.

The cost: when no records arrive, stream time stands still and nothing expires. The store
does not grow then either (only records write keys), so it stays bounded under any churn.
Outside a record (a punctuator) the write's timestamp is the task's stream time. A late
record whose ``ts + ttl_ms`` is already at or before stream time writes a key that is
expired at once. Kafka's proposal (KIP-1225) defaults to the wall clock instead; RocksDB's
own TTL (TtlDB) is wall clock and never reaches the changelog (KAFKA-4273), so it is not
used.

Layout, all in the store's one data column family::

    key                         expires_at (8 bytes, big-endian) || value
    EXPIRY_INDEX_PREFIX || expires_at (8 bytes, big-endian) || key      -> b""

- Timestamps are >= 0, so big-endian bytes sort as the numbers: the index is in expiry
  order, and a sweep reads it from its start.
- Keys starting with :data:`RESERVED_PREFIX` (0xFF) are the store's own in a TTL store and
  refused as user keys (:class:`ReservedKey`). No UTF-8 text contains 0xFF, so str and
  JSON keys never collide; only bytes keys can. User scans stop below it
  (``KeyRange.below(RESERVED_PREFIX)``).
- The changelog carries the stored shape (expiry prefix included), so a restore or a
  standby gets the expiry with the value. Index entries are local: never changelogged,
  rebuilt on restore from each restored put (:func:`index_key_for`).
- A put does not have to remove the key's previous index entry: the sweep checks each
  entry against the key's current value and drops stale ones (:func:`plan_sweep`). A
  writer that has the old value at hand (get-modify-put) removes it at once
  (:func:`index_changes`), which keeps the index the size of the store.
- Expiry deletes the key with a changelog tombstone, so standbys, interactive-query
  replicas and compaction all see it, and TTL keys can live beside permanent ones in a
  ``compact`` changelog (Quix Streams writes no tombstone here).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from worker.errors import WorkerError

RESERVED_PREFIX = b"\xff"
EXPIRY_INDEX_PREFIX = RESERVED_PREFIX + b"ttl\x00"
_BE8 = struct.Struct(">Q")
_STAMP = _BE8.size
_INDEX_HEAD = len(EXPIRY_INDEX_PREFIX) + _STAMP
MIN_SWEEP_BUDGET = 1000  # index entries one sweep may examine, at the least


class ReservedKey(WorkerError, ValueError):
    """A processor wrote a key starting with 0xFF to a TTL store, where that space holds
    the store's index. A processing error of the record: change the key's encoding."""


class CorruptTtlValue(WorkerError, ValueError):
    """A stored value too short to hold its expiry: the store is not a TTL store's, or
    was written without TTL. Treat as corruption of the store."""


def check_ttl(ttl_ms: object) -> int:
    """``ttl_ms`` if usable (an int >= 1), for ``add_store(..., ttl_ms=...)``.

    Raises:
        ValueError: not an int, or below 1.
    """
    if type(ttl_ms) is not int or ttl_ms < 1:
        raise ValueError(f"ttl_ms must be an int >= 1, got {ttl_ms!r}")
    return ttl_ms


def check_key(key: bytes) -> bytes:
    """``key`` if a user may write it to a TTL store.

    Raises:
        ReservedKey: the key starts with :data:`RESERVED_PREFIX`.
    """
    if key.startswith(RESERVED_PREFIX):
        raise ReservedKey(f"key {key[:16]!r} starts with 0xFF, reserved in a store with a TTL")
    return key


def expires_at(write_ms: int, ttl_ms: int) -> int:
    """When a key written at ``write_ms`` (its record's time) expires."""
    return max(0, write_ms) + ttl_ms


def encode(value: bytes, expires_at_ms: int) -> bytes:
    """The stored shape: ``expires_at`` as 8 big-endian bytes, then the value."""
    return _BE8.pack(expires_at_ms) + value


def decode(stored: bytes) -> tuple[int, bytes]:
    """``(expires_at, value)`` of a stored value.

    Raises:
        CorruptTtlValue: fewer than 8 bytes.
    """
    if len(stored) < _STAMP:
        raise CorruptTtlValue(f"stored value of {len(stored)} bytes has no expiry prefix")
    return _BE8.unpack_from(stored)[0], stored[_STAMP:]


def is_expired(expires_at_ms: int, now_ms: int) -> bool:
    """True once stream time ``now_ms`` has reached the expiry."""
    return expires_at_ms <= now_ms


def live_value(stored: bytes | None, now_ms: int) -> bytes | None:
    """The read filter: the user's value, or None if absent or expired at ``now_ms``.

    Applied on every read, so a key reads as absent the moment it expires, however far
    behind the sweep is.
    """
    if stored is None:
        return None
    expiry, value = decode(stored)
    return None if expiry <= now_ms else value


def index_key(expires_at_ms: int, key: bytes) -> bytes:
    """The expiry index entry of ``key`` expiring at ``expires_at_ms``."""
    return EXPIRY_INDEX_PREFIX + _BE8.pack(expires_at_ms) + key


def parse_index_key(entry: bytes) -> tuple[int, bytes]:
    """``(expires_at, key)`` of an index entry.

    Raises:
        CorruptTtlValue: not an index entry.
    """
    if not entry.startswith(EXPIRY_INDEX_PREFIX) or len(entry) < _INDEX_HEAD:
        raise CorruptTtlValue(f"{entry[:24]!r} is not an expiry index entry")
    return _BE8.unpack_from(entry, len(EXPIRY_INDEX_PREFIX))[0], entry[_INDEX_HEAD:]


def is_index_key(key: bytes) -> bool:
    """True for index entries: local to this store, never sent to the changelog."""
    return key.startswith(EXPIRY_INDEX_PREFIX)


def index_key_for(key: bytes, stored: bytes) -> bytes:
    """The index entry a stored (restored) record needs: restore calls it per put."""
    return index_key(decode(stored)[0], key)


def index_changes(
    key: bytes, old_stored: bytes | None, new_expires_at_ms: int
) -> tuple[bytes | None, bytes]:
    """``(entry to delete or None, entry to put)`` for a put of ``key``.

    ``old_stored`` is the key's value before the put, when the writer has it; the old
    entry is deleted only if it differs from the new one.
    """
    new = index_key(new_expires_at_ms, key)
    if old_stored is None:
        return None, new
    old = index_key_for(key, old_stored)
    return (None if old == new else old), new


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """What one sweep deletes. ``expired``: user keys to delete (with a changelog
    tombstone); ``index_deletes``: index entries to delete (local only); ``more``: the
    budget ran out before the first entry not yet due, so sweep again soon."""

    expired: tuple[bytes, ...]
    index_deletes: tuple[bytes, ...]
    more: bool


def sweep_budget(writes_since_last_sweep: int) -> int:
    """Index entries the next sweep may examine: twice the writes since the last one, at
    least :data:`MIN_SWEEP_BUDGET`.

    Each write adds at most one index entry, so a sweep per batch with this budget removes
    entries faster than they arrive: the index, and with it the store, stays bounded under
    any steady churn, and no sweep is bigger than twice its batch (no stop-the-world).
    """
    return max(MIN_SWEEP_BUDGET, 2 * writes_since_last_sweep)


def plan_sweep(
    index: Iterable[bytes],
    now_ms: int,
    budget: int,
    current: Callable[[bytes], bytes | None],
) -> SweepPlan:
    """Plan deleting what has expired at stream time ``now_ms``.

    Steps: walk ``index`` (the index entries in key order, i.e. by expiry: a prefix scan of
    :data:`EXPIRY_INDEX_PREFIX` that includes buffered writes); stop at the first entry not
    yet due, or after ``budget`` entries. For each due entry read the key's current stored
    value with ``current`` (buffer first, then RocksDB) and

    1. the value carries this expiry: the key expired; delete it and the entry;
    2. the key is gone, or was written again with another expiry: the entry is stale;
       delete the entry only (the key's own entry handles it).

    Deleting an entry makes the next sweep start after it, so no cursor is needed.
    """
    expired: list[bytes] = []
    index_deletes: list[bytes] = []
    for entry in index:
        expiry, key = parse_index_key(entry)
        if expiry > now_ms:
            return SweepPlan(tuple(expired), tuple(index_deletes), more=False)
        if len(index_deletes) == budget:
            return SweepPlan(tuple(expired), tuple(index_deletes), more=True)
        stored = current(key)
        if stored is not None and decode(stored)[0] == expiry:
            expired.append(key)
        index_deletes.append(entry)
    return SweepPlan(tuple(expired), tuple(index_deletes), more=False)
