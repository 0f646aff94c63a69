"""A stream-stream join's buffer: one side's records by key and time, duplicates kept.

A :class:`~worker.state.window_store.WindowedStore` with the segmented layout of
``window_format.py``, each record one entry::

    key   = seg_be8 || esc(key_bytes) || ts_be8 || seq_be8      seg = ts // segment
    value = the record's value bytes

so the windowed store's machinery applies unchanged: ``ts`` sits where a session's end
does (retention is judged by it, expired segments leave by one range delete, restores
skip them) and ``seq`` where its start does. ``seq`` numbers the records of the store in
arrival order, so two records of one key at one time are two entries (Kafka Streams'
window stores "retain duplicates" with a sequence number too). It is kept under the
reserved key :data:`NEXT_SEQ`, written in the same commit as the entries and
changelogged like them: a restart, a move or a restore continues the numbering, never
reusing a number an entry still holds.

Owner thread only, as :class:`WindowedStore`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from worker.state.contracts import Buffered, RawJoinBuffer
from worker.state.store import RestoreBatch
from worker.state.window_format import (
    decode_meta,
    decode_segmented_key,
    encode_meta,
    meta_key,
    segment_ranges,
    segmented_key,
)
from worker.state.window_store import WindowedStore, check_times

NEXT_SEQ = meta_key("next_seq")


class JoinBufferStore(WindowedStore):
    """One side of a stream-stream join (see the module doc). Open with
    ``open_windowed`` and a segmented layout whose retention is the join's
    ``before + after + grace``."""

    _next_seq: int
    _seq_unwritten: bool
    _appended: dict[bytes, list[Buffered]]  # this commit's records by key (see fetch)

    def _load_progress(self) -> None:
        super()._load_progress()
        self._next_seq = decode_meta(self.get(NEXT_SEQ), 0)
        self._seq_unwritten = False
        self._appended = {}

    def append(self, key: bytes, ts_ms: int, value: bytes) -> int | None:
        """Buffer ``value`` as ``key``'s record at ``ts_ms``; its sequence number, or
        None when ``ts_ms`` is already past retention (dropped, counted).

        Raises:
            ValueError: ``ts_ms`` outside the times a store holds.
        """
        self.advance(ts_ms)
        if ts_ms < self.live_from:
            self._dropped()
            return None
        seq = self._next_seq
        self._next_seq = seq + 1
        self._seq_unwritten = True
        self.put(segmented_key(key, seq, ts_ms, self.layout.interval_ms), value)
        self._appended.setdefault(key, []).append(Buffered(ts_ms, seq, value))
        return seq

    def fetch(self, key: bytes, from_ms: int, to_ms: int) -> list[Buffered]:
        """``key``'s live records with a time in ``[from_ms, to_ms]`` (clamped at 0), by
        time then arrival: one seek per segment, uncommitted writes included.

        The committed records are read from RocksDB alone and this commit's from
        ``_appended``: a scan merged with the write buffer copies the buffered keys of
        its range on every call, which made a fetch per record cost the whole commit
        interval's records (the join's profile). The two never overlap: entries are
        only appended, and an expired one is filtered by time either way."""
        lo, hi = max(from_ms, self.live_from, 0), min(to_ms, self.observed_ms)
        if hi < lo:
            return []
        check_times(lo, hi)
        found = [b for b in self._appended.get(key, ()) if lo <= b.ts_ms <= hi]
        for found_range in segment_ranges(key, lo, hi, self.layout.interval_ms):
            with self._committed_scan(found_range) as scan:
                for stored_key, stored in scan:
                    _key, seq, ts = decode_segmented_key(stored_key)
                    found.append(Buffered(ts, seq, stored))
        found.sort()
        return found

    def commit(self, offsets: Mapping[tuple[str, int], int], stream_time: int = -1) -> None:
        super().commit(offsets, stream_time)
        self._appended = {}  # in RocksDB now (a failed commit raised and kept them)

    def _settle(self) -> None:
        super()._settle()
        if self._seq_unwritten:
            self._seq_unwritten = False
            self.put(NEXT_SEQ, encode_meta(self._next_seq))

    def write_restored(
        self,
        batch: RestoreBatch,
        offsets: Mapping[tuple[str, int], int],
        stream_time: int = -1,
    ) -> None:
        """As ``WindowedStore.write_restored``; the numbering continues from what the
        changelog carried."""
        super().write_restored(batch, offsets, stream_time)
        self._next_seq = max(self._next_seq, decode_meta(self.get(NEXT_SEQ), 0))


if TYPE_CHECKING:  # mypy holds the store to the contract the processing layer uses
    _BUFFER: type[RawJoinBuffer] = JoinBufferStore
