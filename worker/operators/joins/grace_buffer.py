"""A stream-table join's grace buffer: stream records held back until stream time passes
their timestamp plus grace, then released in timestamp order (Kafka Streams' KIP-923).

With a versioned table, a table version that arrives after the stream record it should
have matched, but within the grace, still matches: the record waits. The buffer is a
key-value store of the join's own (changelogged, committed with the task)::

    key   = ts_be8 || seq_be8          time first: what is due is one scan from the start
    value = key_len_be4 || key_bytes || value_bytes

``seq`` numbers the records in arrival order (two records at one time are two entries);
it and the buffer's observed time (the largest stream time it has seen) live under
reserved keys (``0xFF``), written with the entries, so a restart or a restore resumes
them. Records are held without their headers: a released record's output has none.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from worker.processing.store_views import KeyValueStore

_KEY = struct.Struct(">QQ")
_LEN = struct.Struct(">I")
_TIME = struct.Struct(">q")
NEXT_SEQ = b"\xffnext_seq"
OBSERVED = b"\xffobserved_ms"


class GraceBuffer:
    """The buffer over its store view (BYTES keys and values), for one task's record."""

    __slots__ = ("_store",)

    def __init__(self, store: KeyValueStore) -> None:
        self._store = store

    def observed_ms(self) -> int:
        stored = self._store.get(OBSERVED)
        return -1 if stored is None else int(_TIME.unpack(stored)[0])

    def hold(self, key: bytes, value: bytes, ts: int) -> None:
        """Buffer a record at ``ts`` and raise the observed time to it."""
        stored = self._store.get(NEXT_SEQ)
        seq = 0 if stored is None else int(_KEY.unpack(stored)[1])
        self._store.put(NEXT_SEQ, _KEY.pack(0, seq + 1))
        self._store.put(_KEY.pack(ts, seq), _LEN.pack(len(key)) + key + value)
        if ts > self.observed_ms():
            self._store.put(OBSERVED, _TIME.pack(ts))

    def release(self, upto_ms: int) -> Iterator[tuple[int, bytes, bytes]]:
        """Delete and yield ``(ts, key, value)`` of every record at or before
        ``upto_ms``, in time then arrival order."""
        if upto_ms < 0:
            return
        with self._store.range(None, _KEY.pack(upto_ms + 1, 0)) as found:
            due: list[tuple[Any, Any]] = list(found)
        for entry, stored in due:
            self._store.delete(entry)
            ts = _KEY.unpack(entry)[0]
            length = _LEN.unpack_from(stored, 0)[0]
            start = _LEN.size
            yield ts, stored[start : start + length], stored[start + length :]
