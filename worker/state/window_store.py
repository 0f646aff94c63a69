"""Windowed stores: a :class:`~worker.state.store.Store` holding windows, bounded by retention.

A windowed store is an ordinary store (raw bytes, the write buffer, the atomic commit of
data with changelog offsets, restores, standbys, warm-ups, exactly-once) whose keys and
values have the layout of ``window_format.py``; :class:`WindowedStore` adds what time
needs, and ``window_stores.py`` the window and session operations on top.

**Observed time.** The largest write time the store has seen (the record timestamps
the writes carry; emit-final raises it to the task's stream time with :meth:`advance`),
kept under the reserved key ``OBSERVED_MS`` and written in the same commit as the data,
so a restart, a move or a restore judges retention as the writer did.

**Retention and expiry.** A window whose time (start; end for sessions) is below
``observed - retention`` is *expired*: reads skip it even while it is still on disk
(KAFKA-12960), and a write to it is dropped and counted (:attr:`dropped_writes`).
Expired windows leave RocksDB by time range: when the expiry cutoff
(``window_format.expiry_cutoff``: ``min(observed - retention, last_emitted_close)``, so an
emit-final store never loses a window before it is emitted) gains a whole step of
``segment_interval(retention)``, the next commit applies one ``delete_range`` (up to the
latest step) first in its atomic batch, with the new ``EXPIRED_UPTO``. Never one delete
per key, and never a changelog tombstone: the changelog topic is ``compact,delete`` with
time retention, so the broker drops old windows by itself.

**Restore and standbys.** :meth:`restore_batch` gathers a fetched batch instead of
writing it at once; :meth:`write_restored` first advances the observed time (and the emit
progress) to what the batch carries, then writes only the records still above the expiry
cutoff, after the same range delete. A batch alone knows little: a changelog in time
order has almost nothing expired within its own batch. So before reading, the changelog
reader hands the store the last records of the partition
(:meth:`learn_changelog_tail`); the progress they carry is a lower bound of what the
restore ends with, and every batch skips what is expired by it. A cold restore then
writes about the windows still inside retention, and a standby stays as bounded as its
active.

Owner thread only, as :class:`Store`; the ``committed_*`` reads of ``window_stores.py``
may run on any thread (interactive queries), under the store's close lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self, cast

from worker.clock import MAX_TIME_MS
from worker.state.contracts import WindowEvents
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.rocksdb_errors import rocksdb_errors
from worker.state.scan import KeyRange, Scan, ScanRangeError, check_limit
from worker.state.store import RestoreBatch, Store
from worker.state.window_format import (
    EXPIRED_UPTO,
    LAST_EMITTED_CLOSE,
    OBSERVED_MS,
    decode_meta,
    encode_meta,
    entry_time,
    expiry_cutoff,
    is_meta_key,
    plan_expiry,
    progress_floor,
    segment_interval,
)

_NOTHING_BUFFERED: Mapping[bytes, bytes | None] = {}


@dataclass(frozen=True, slots=True)
class WindowLayout:
    """What a windowed store knows of its windows.

    ``segmented``: sessions (and sliding windows), keyed ``seg || key || end || start``
    and judged by end; otherwise fixed windows keyed ``start || key`` and judged by start.
    ``size_ms`` and ``advance_ms``: fixed windows only (end = start + size; starts are
    multiples of the advance). ``hold_until_emitted``: an emit-final store, whose expiry
    waits for :meth:`WindowedStore.mark_emitted` (nothing emitted yet holds everything).
    ``max_ahead_ms``: segmented layouts only, how far after the observed time a window
    may end (0 for sessions, whose end is a record's time; ``time_difference + 1`` for
    sliding windows, whose right window ends after the record that makes it).
    """

    segmented: bool
    retention_ms: int
    size_ms: int = 0
    advance_ms: int = 1
    hold_until_emitted: bool = False
    max_ahead_ms: int = 0

    @property
    def interval_ms(self) -> int:
        """Expiry's step (and the segment length of segmented layouts)."""
        return segment_interval(self.retention_ms)


def check_times(from_ms: int, to_ms: int) -> None:
    """Window times of a read, inclusive at both ends.

    Raises:
        ScanRangeError: not ints, or ``from_ms > to_ms``.
    """
    if type(from_ms) is not int or type(to_ms) is not int:
        raise ScanRangeError(f"window times must be ints, got {from_ms!r} and {to_ms!r}")
    if from_ms > to_ms:
        raise ScanRangeError(f"window time from {from_ms} is after to {to_ms}")


class _NoEvents:
    def expiry_range(self) -> None:
        return None

    def expired_write(self) -> None:
        return None

    def restore_skipped(self, records: int) -> None:
        return None

    def late_record(self, partition: int | None, key: bytes | None, late_ms: int) -> None:
        return None


def _later(emitted: int | None, other: int | None) -> int | None:
    """The later of two emit progresses, None (no emit-final marker) counting as none."""
    return emitted if other is None else max(emitted or 0, other)


class _RangeBatch(RestoreBatch, Protocol):
    """``Store.restore_batch``'s batch (a rocksdict WriteBatch) takes range deletes too."""

    def delete_range(self, lo: bytes, hi: bytes) -> None: ...


class _Gathered:
    """One fetched batch of changelog records, written at :meth:`WindowedStore.write_restored`
    once the whole batch has advanced the observed time."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.records.append((key, value))

    def delete(self, key: bytes) -> None:
        self.records.append((key, None))

    def len(self) -> int:
        return len(self.records)

    def is_empty(self) -> bool:
        return not self.records


class WindowedStore(Store):
    """A store of windows: observed time, retention, expiry by range, filtered restores.

    Open with :meth:`open_windowed`. ``observed_ms`` is -1 before the first write.
    """

    layout: WindowLayout
    observed_ms: int
    last_emitted_close: int | None
    expired_upto: int
    dropped_writes: int  # writes to expired windows, dropped (for metrics and tests)
    restore_skipped: int  # restored records past the cutoff, not written
    _restore_floor: tuple[int, int | None]  # (observed, emitted) the changelog's tail holds
    expiry_ranges: int  # range deletes buffered
    _step_ms: int  # layout.interval_ms
    _observed_unwritten: bool  # observed_ms rose since it was last buffered
    _expiry_hi: bytes | None  # expiry's range delete [b"", hi) for the next commit
    events: WindowEvents

    @classmethod
    def open_windowed(
        cls,
        path: Path,
        env: RocksDBEnv,
        name: str,
        layout: WindowLayout,
        events: WindowEvents | None = None,
    ) -> Self:
        """:meth:`Store.open`, then the store's progress read from its reserved keys;
        ``events`` hears of expiry ranges, dropped writes and skipped restored records.

        Raises: as :meth:`Store.open`.
        """
        store = cast(Self, cls.open(path, env, name))
        store.layout = layout
        store._step_ms = layout.interval_ms
        store.events = _NoEvents() if events is None else events
        store.dropped_writes = store.restore_skipped = store.expiry_ranges = 0
        store._restore_floor = (-1, None)
        store._load_progress()
        return store

    def _load_progress(self) -> None:
        self.observed_ms = decode_meta(self.get(OBSERVED_MS), -1)
        self._observed_unwritten = False
        self._expiry_hi = None
        emitted = self.get(LAST_EMITTED_CLOSE)
        if emitted is None and not self.layout.hold_until_emitted:
            self.last_emitted_close = None
        else:
            self.last_emitted_close = decode_meta(emitted, 0)
        self.expired_upto = decode_meta(self.get(EXPIRED_UPTO), 0)

    @property
    def live_from(self) -> int:
        """Windows with a time below this read as absent (``observed - retention``)."""
        return self.observed_ms - self.layout.retention_ms

    def _dropped(self) -> bool:
        """A write to an expired window: counted, and False for the caller to return."""
        self.dropped_writes += 1
        self.events.expired_write()
        return False

    def advance(self, time_ms: int) -> None:
        """Raise the observed time to ``time_ms`` (a write's timestamp, or emit-final's
        stream time); never lowers it. When the cutoff gained a step, buffers the range
        delete of what expired.

        The new time joins the buffer only when the buffer is read for a commit
        (:meth:`pending`, :meth:`commit`, see :meth:`_settle`): it rises on almost every
        record, and one buffered write of it per commit is all the changelog and RocksDB
        get anyway (the buffer keeps a key's last write).

        Raises:
            ValueError: ``time_ms`` is past :data:`~worker.clock.MAX_TIME_MS`.
        """
        if time_ms <= self.observed_ms:
            return
        if time_ms > MAX_TIME_MS:
            encode_meta(time_ms)  # raises, naming the time
        self.observed_ms = time_ms
        self._observed_unwritten = True
        last_emitted = self.last_emitted_close
        cutoff = time_ms - self.layout.retention_ms
        if last_emitted is not None and last_emitted < cutoff:
            cutoff = last_emitted
        step = self._step_ms
        if cutoff // step * step > self.expired_upto:  # plan_expiry's test, inline
            self._expire()

    def _settle(self) -> None:
        """Buffer what waits for the commit: the observed time if it rose since it was
        last buffered, and the range delete of what expired since the last commit.

        The range waits because ``WriteBuffer.delete_range`` drops the buffered entries
        in it, a pass over the whole buffer, and a commit interval may cover many expiry
        steps when event time runs fast (a backlog): one range from the first key up to
        the latest step does the work of them all. Until then readers skip the expired
        windows by time, as they skip those still on disk."""
        if self._observed_unwritten:
            self._observed_unwritten = False
            self.put(OBSERVED_MS, encode_meta(self.observed_ms))
        if self._expiry_hi is not None:
            hi, self._expiry_hi = self._expiry_hi, None
            self.delete_range(b"", hi)

    def commit(self, offsets: Mapping[tuple[str, int], int], stream_time: int = -1) -> None:
        """:meth:`Store.commit`; when the batch held expiry's range delete, the expired
        range is then compacted (:meth:`_compact_expired`)."""
        self._settle()  # here too: the range delete it may buffer is read before the commit
        ranges = self._buffer.ranges  # expiry's only: no other writer deletes by range
        expired = max(hi for _lo, hi in ranges) if ranges else None
        super().commit(offsets, stream_time)
        if expired is not None:
            self._compact_expired(expired)

    def _compact_expired(self, hi: bytes) -> None:
        """Compact ``[b"", hi)``, everything expired: RocksDB frees a deleted range's bytes
        only when compaction rewrites the files under it, and left to its own compactions
        the store's bytes on disk climbed in a sawtooth whose troughs rose each time
        (docs/benchmarks.md, the hourly-retention benchmark). The keys are time-first (by
        segment for sessions), so the files under the range hold little else: one short
        compaction per expiry step, which comes once per half retention of stream time."""
        db = self._require_open()
        with rocksdb_errors(self.path):
            db.compact_range(b"", hi)

    def mark_emitted(self, close_bound: int) -> None:
        """Emit-final has emitted every window whose time (start; end for sessions) is
        below ``close_bound``: expiry may now take them. Never lowers the mark."""
        if self.last_emitted_close is not None and close_bound <= self.last_emitted_close:
            return
        self.last_emitted_close = close_bound
        self.put(LAST_EMITTED_CLOSE, encode_meta(max(close_bound, 0)))
        self._expire()

    def _cutoff(self, observed_ms: int, last_emitted: int | None) -> int:
        return expiry_cutoff(observed_ms, self.layout.retention_ms, last_emitted)

    def _expire(self) -> None:
        layout = self.layout
        cutoff = self._cutoff(self.observed_ms, self.last_emitted_close)
        step = self._step_ms
        if cutoff // step * step <= self.expired_upto:
            return  # no whole step gained: plan_expiry's test, inline (it runs per advance)
        plan = plan_expiry(
            cutoff,
            self.expired_upto,
            step,
            segmented=layout.segmented,
        )
        if plan is None:
            return
        assert plan.range.lo == b"" and plan.range.hi is not None
        self._expiry_hi = plan.range.hi  # buffered at the next commit (_settle)
        self.expired_upto = plan.expired_upto
        self.put(EXPIRED_UPTO, encode_meta(plan.expired_upto))
        self.expiry_ranges += 1
        self.events.expiry_range()

    def discard_pending(self) -> None:
        """Forget the buffered writes, and the progress they carried."""
        super().discard_pending()
        self._load_progress()

    # -- restore ---------------------------------------------------------------------

    def learn_changelog_tail(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Records read from the end of this store's changelog before it is restored or
        tailed from an earlier offset: the progress they carry (:func:`progress_floor`)
        bounds the restore's end from below (it reads to the end, and both only rise), so
        :meth:`write_restored` skips every window expired by then. Never lowers it."""
        observed, emitted = progress_floor(records)
        floor_observed, floor_emitted = self._restore_floor
        self._restore_floor = (max(observed, floor_observed), _later(floor_emitted, emitted))

    def restore_batch(self) -> RestoreBatch:
        """A batch that gathers the fetched records (see :meth:`write_restored`)."""
        return _Gathered()

    def write_restored(
        self,
        batch: RestoreBatch,
        offsets: Mapping[tuple[str, int], int],
        stream_time: int = -1,
    ) -> None:
        """Write one fetched batch, skipping what has expired, in one atomic write.

        Steps: 1. the observed time and emit progress advance to the largest the batch
        carries, and the cutoff is judged by them or the changelog tail's, whichever is
        later; 2. the expiry plan for it becomes the write's range delete; 3. the
        records are added in order, except windows below the expiry cutoff (tombstones
        always pass) and the active's ``EXPIRED_UPTO`` (expiry progress is local); 4.
        one write with the offsets (``Store.write_restored``); 5. the progress is kept.
        """
        if not isinstance(batch, _Gathered):
            super().write_restored(batch, offsets, stream_time)
            return
        observed, emitted = progress_floor(batch.records)
        observed = max(self.observed_ms, observed)
        emitted = _later(self.last_emitted_close, emitted)
        floor_observed, floor_emitted = self._restore_floor
        cutoff = self._cutoff(max(observed, floor_observed), _later(emitted, floor_emitted))
        layout = self.layout
        plan = plan_expiry(
            cutoff, self.expired_upto, layout.interval_ms, segmented=layout.segmented
        )
        out = cast(_RangeBatch, super().restore_batch())
        if plan is not None:
            assert plan.range.lo is not None and plan.range.hi is not None
            out.delete_range(plan.range.lo, plan.range.hi)
            out.put(EXPIRED_UPTO, encode_meta(plan.expired_upto))
        skipped = 0
        for key, value in batch.records:
            if value is None:
                out.delete(key)
            elif is_meta_key(key):
                if key != EXPIRED_UPTO:
                    out.put(key, value)
            elif entry_time(key, segmented=layout.segmented) < cutoff:
                skipped += 1
            else:
                out.put(key, value)
        super().write_restored(out, offsets, stream_time)
        self.observed_ms, self.last_emitted_close = observed, emitted
        if plan is not None:
            self.expired_upto = plan.expired_upto
            self.expiry_ranges += 1
            self.events.expiry_range()
        if skipped:
            self.restore_skipped += skipped
            self.events.restore_skipped(skipped)

    # -- scans for window_stores.py -----------------------------------------------------

    def _scan(self, found: KeyRange) -> Scan:
        """``found`` in key order, this task's buffered writes merged in (owner thread):
        :meth:`Store.scan`, so the next commit closes it if its reader did not."""
        return self.scan(found.lo, found.hi)

    def _committed_scan(self, found: KeyRange) -> Scan:
        """``found`` as committed; call with the close lock held, and close before
        releasing it."""
        return Scan(self._require_open().iter(), _NOTHING_BUFFERED, found)

    def _committed_bounds(self, from_ms: int, to_ms: int, limit: int | None) -> tuple[int, int]:
        """``(committed observed time, lowest live time from from_ms)`` of a committed
        read, its arguments checked. Call with the close lock held."""
        check_times(from_ms, to_ms)
        check_limit(limit)
        observed = decode_meta(self._read_committed(OBSERVED_MS), -1)
        return observed, max(from_ms, observed - self.layout.retention_ms)
