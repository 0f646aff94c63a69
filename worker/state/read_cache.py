"""A store's read cache: committed values read lately, kept as Python bytes.

Processors read the same keys over and over, and a dict lookup is far cheaper than a
RocksDB point read through rocksdict (docs/operations.md, "Processing speed"), so
:class:`ReadCache` keeps what was read or committed, within the share of the env's
read-cache budget that its store is given (``RocksDBEnv.read_cache_share``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from worker.state.contracts import Lookup

# What one entry costs beyond its key and value: two bytes objects' headers and a dict slot.
ENTRY_BYTES = 112


class CacheBudget(Protocol):
    """Where a cache learns its share (``RocksDBEnv``: the budget over the open stores)."""

    @property
    def read_cache_share(self) -> int: ...


class ReadCache:
    """Committed values by key (``None``: absent from RocksDB), within a byte budget.

    Invariant: each entry equals what RocksDB holds. The store adds what it reads and
    what it commits, and clears the cache when it writes anything else (restored batches)
    or closes.

    Accounting rule. An entry costs ``len(key) + len(value) + ENTRY_BYTES``; one larger
    than the whole share is never kept. Two counts are estimates, so that no Python loop
    over the entries runs inside a commit (which stops processing): the entries a commit
    adds are counted at the committed buffer's mean entry size, and the entries a trim
    keeps at the cache's mean entry size. Past its share the cache is trimmed to the
    entries added last, about half the share: half, so a trim comes at most once per
    half a share of new entries; emptying it instead (before issue 14) made every read
    after a commit a RocksDB point read whenever the key space was larger than the cache.

    ``lookup`` is the entries' ``dict.get`` (``lookup(key, default)``), bound once: the
    dict is never replaced, only changed in place, so a caller may keep ``lookup`` for
    the cache's whole life (``worker.state.contracts.ReadPath`` does). Owner thread only.
    """

    __slots__ = ("_entries", "_bytes", "_budget", "lookup")

    def __init__(self, budget: CacheBudget) -> None:
        self._entries: Final[dict[bytes, bytes | None]] = {}
        self._bytes = 0
        self._budget = budget
        self.lookup: Final[Lookup] = self._entries.get

    @property
    def used_bytes(self) -> int:
        """The entries' cost by the accounting rule (within the share after each change)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Keep what RocksDB returned for ``key`` (None: nothing there)."""
        size = len(key) + (0 if value is None else len(value)) + ENTRY_BYTES
        share = self._budget.read_cache_share
        if size > share:
            return
        self._entries[key] = value
        self._bytes += size
        if self._bytes > share:
            self._trim(share)

    def add_committed(self, written: Mapping[bytes, bytes | None], written_bytes: int) -> None:
        """``written`` (a write buffer holding ``written_bytes`` of keys and values) was
        just committed: its values are RocksDB's now, keep them.

        Keys the cache held already are not counted again; the added ones are counted at
        the buffer's mean entry size (see the accounting rule).
        """
        entries = self._entries
        before = len(entries)
        entries.update(written)
        added = len(entries) - before
        if added:
            self._bytes += added * (written_bytes // len(written) + ENTRY_BYTES)
        share = self._budget.read_cache_share
        if self._bytes > share:
            self._trim(share)

    def clear(self) -> None:
        """Forget every entry (RocksDB was written behind the cache's back, or closed)."""
        self._entries.clear()
        self._bytes = 0

    def _trim(self, share: int) -> None:
        """Keep the entries added last, about half ``share`` (three C calls, no loop)."""
        entries, used = self._entries, self._bytes
        count = len(entries)
        keep = count * (share // 2) // used if used > 0 else 0
        kept = list(entries.items())[count - keep :] if keep else []
        entries.clear()  # in place: ``lookup`` is bound to this dict
        entries.update(kept)
        self._bytes = used * keep // count if count else 0
