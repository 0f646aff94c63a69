"""Windowed aggregations: the processor behind ``Topology.add_windowed_aggregation``.

One operator per aggregation, with a windowed store of the same name (fixed windows for
tumbling and hopping, the session layout for sessions and sliding windows). Per record:

1. raise the store's observed time to the record's timestamp (it counts even when the
   record turns out late, as in ``windows.py``: the operator's observed time includes the
   current record; for fixed windows the window's write does it);
2. find the windows the record updates (:mod:`.windows`, :mod:`.sessions`,
   :mod:`.sliding`); none open: the record is *late*, dropped and counted
   (``worker_late_records_total{task,processor}``, through the store's events hook);
3. fold it into each window at the record's timestamp, storing the window's largest
   record time, which is the output's timestamp (reference §6.2);
4. ``emit="update"``: forward ``Windowed(key, start, end)`` with the new aggregate.

``emit="final"``: a stream-time punctuator (``windows.emit_schedule`` for fixed windows)
raises the observed time to the task's stream time, scans the store for the windows closed
since the last emission (``last_emitted_close`` up to the close bound: a key range of the
store, never a memory buffer), forwards each once with no headers, then records the new
bound with ``mark_emitted``. The bound, the observed time and the outputs join the task's
commit, so under exactly-once a crash before the commit replays the step and a crash after
it never repeats it; the store holds a window until that bound passes it
(``hold_until_emitted``). A closed window takes no more writes (the record is late for it),
so its final result cannot change after the scan; sliding windows, whose closed windows
still feed new ones, emit first when a record's plan touches a closed window not yet
emitted (:func:`.sliding.touches_unemitted_closed`).

Records with a None key (or one its serde writes as no bytes) or a None value are
skipped, as Kafka Streams' aggregations do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from worker.errors import TopologyError
from worker.processing import sessions, sliding
from worker.processing.context import ProcessorContext
from worker.processing.windows import SessionWindows, SlidingWindows, TimeWindows, Window, Windows
from worker.serde import Codec, Serde, SerdeError
from worker.windowed_serde import Windowed

Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]  # (key, value, aggregate) -> aggregate
Merger = Callable[[Any, Any, Any], Any]  # (key, aggregate, aggregate) -> aggregate
EMIT_MODES = ("update", "final")
# Sessions and sliding windows close at any instant: emit-final checks this often (in
# stream time, or every gap / time difference when that is shorter).
SESSION_EMIT_INTERVAL_MS = 1_000
_NO_HEADERS: list[tuple[str, bytes]] = []


class _Stored(Protocol):
    key: bytes
    start_ms: int
    end_ms: int
    max_ts_ms: int
    value: bytes


class _Events(Protocol):
    def late_record(self, partition: int, key: bytes | None, late_ms: int) -> None: ...


class _RawStore(Protocol):
    """What the operator uses of ``worker.state.window_stores``' stores."""

    observed_ms: int
    last_emitted_close: int | None
    events: _Events

    def advance(self, time_ms: int) -> None: ...

    def mark_emitted(self, close_bound: int) -> None: ...


class WindowedAggregation:
    """A windowed aggregation's processor (``process``) and, for ``emit="final"``, its
    punctuator (registered by ``init``). Shared by every task of the topology: per-task
    state lives in the task's store only."""

    def __init__(
        self,
        name: str,
        windows: Windows,
        initializer: Initializer,
        aggregator: Aggregator,
        merger: Merger | None,
        emit: str,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        """Raises:
        TopologyError: ``emit`` is not ``"update"`` or ``"final"``, a function is not
            callable, or ``merger`` is missing for sessions (or given for other windows).
        """
        if emit not in EMIT_MODES:
            raise TopologyError(f"aggregation {name!r}: emit must be 'update' or 'final'")
        for role, fn in (("initializer", initializer), ("aggregator", aggregator)):
            if not callable(fn):
                raise TopologyError(f"aggregation {name!r}: {role} is not callable")
        if isinstance(windows, SessionWindows) != (merger is not None):
            raise TopologyError(
                f"aggregation {name!r}: merger is required for session windows and "
                "refused for the other kinds"
            )
        if merger is not None and not callable(merger):
            raise TopologyError(f"aggregation {name!r}: merger is not callable")
        self.name = name
        self.windows = windows
        self.final = emit == "final"
        self._initializer = initializer
        self._aggregator = aggregator
        self._merger = merger
        self._keys = Codec(key_serde, kept=True)
        self._values = Codec(value_serde, kept=True)
        # Tumbling windows take the fast path (_tumbling); a window starting below
        # ``observed - _close_lag`` is closed (TimeWindows.close_bound).
        self._tumbling_fast = uses_fast_path(windows)
        self._size = windows.size_ms if isinstance(windows, TimeWindows) else 0
        self._close_lag = self._size + windows.grace_ms - 1
        # not kept: the store copies the bytes into the stored value
        self._store_encode = Codec(value_serde).fast_encode

    # -- shared -------------------------------------------------------------------

    def _raw(self, ctx: ProcessorContext) -> Any:
        return ctx.current_node.stores[self.name].raw

    def _encode(self, aggregate: Any) -> bytes:
        try:  # the codec's rule inline (this runs per window update): None first
            data = None if aggregate is None else self._values.fast_encode(aggregate)
        except Exception:
            data = self._values.encode(aggregate)
        if data is None:
            raise SerdeError(
                f"aggregation {self.name!r}: aggregate {aggregate!r} encodes to nothing"
            )
        return data

    def _emit(
        self, ctx: ProcessorContext, key: Any, start: int, end: int, aggregate: Any, max_ts: int
    ) -> None:
        windowed = Windowed(key, start, end)
        if max_ts == ctx.timestamp:  # the common case: the record is the window's latest
            ctx.forward(windowed, aggregate)
        else:
            ctx.forward(windowed, aggregate, timestamp=max_ts)

    def init(self, ctx: ProcessorContext) -> None:
        """Register emit-final's punctuator (``add_processor(..., init=)``)."""
        windows = self.windows
        if isinstance(windows, TimeWindows):
            interval, phase = windows.emit_schedule()
        else:
            reach = (
                windows.gap_ms
                if isinstance(windows, SessionWindows)
                else windows.time_difference_ms
            )
            interval, phase = min(SESSION_EMIT_INTERVAL_MS, reach), 0
        ctx.schedule(interval, "stream", self.emit_final, phase_ms=phase)

    def emit_final(self, ctx: ProcessorContext, now_ms: int) -> None:
        """Forward, once, every window closed at the task's stream time and not emitted
        yet, oldest first; then mark them emitted (same commit as the outputs)."""
        raw: _RawStore = self._raw(ctx)
        raw.advance(max(now_ms, ctx.stream_time))
        self._emit_closed(ctx, raw)

    def _emit_closed(self, ctx: ProcessorContext, raw: Any) -> None:
        bound = self.windows.close_bound(raw.observed_ms)
        emitted = raw.last_emitted_close or 0
        if bound <= emitted:
            return
        decode_key, decode_value = self._keys.decode, self._values.decode
        for stored in self._closed(raw, emitted, bound - 1):
            window = Window(stored.start_ms, stored.end_ms)
            ctx.forward(
                Windowed(decode_key(stored.key), window.start_ms, window.end_ms),
                decode_value(stored.value),
                timestamp=stored.max_ts_ms,
                headers=_NO_HEADERS,
            )
        raw.mark_emitted(bound)

    def _closed(self, raw: Any, from_ms: int, to_ms: int) -> Iterator[_Stored]:
        if isinstance(self.windows, TimeWindows):
            return raw.fetch_all_windows(from_ms, to_ms, live_only=False)  # type: ignore[no-any-return]
        return raw.fetch_all_sessions(from_ms, to_ms, live_only=False)  # type: ignore[no-any-return]

    def _late(self, raw: Any, ctx: ProcessorContext) -> None:
        record = ctx.current_record
        raw.events.late_record(record.partition(), record.key(), raw.observed_ms - ctx.timestamp)

    # -- per record ---------------------------------------------------------------

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        """Fold one record into its windows (the processor function)."""
        if key is None or value is None:
            return
        try:  # the codec's rule inline (None is handled above)
            raw_key = self._keys.fast_encode(key)
        except Exception:
            raw_key = self._keys.encode(key)
        if raw_key is None:
            return
        raw = ctx.current_node.stores[self.name].raw
        ts = ctx.timestamp
        windows = self.windows
        if self._tumbling_fast:
            self._tumbling(ctx, raw, key, raw_key, value, ts)
            return
        if isinstance(windows, TimeWindows):
            self._fixed(ctx, raw, windows, key, raw_key, value, ts)
            return
        raw.advance(ts)
        if isinstance(windows, SessionWindows):
            self._session(ctx, raw, windows, key, raw_key, value, ts)
        else:
            self._sliding(ctx, raw, windows, key, raw_key, value, ts)

    def _fixed(
        self,
        ctx: ProcessorContext,
        raw: Any,
        windows: TimeWindows,
        key: Any,
        raw_key: bytes,
        value: Any,
        ts: int,
    ) -> None:
        # The observed time with this record; put_window advances the store to it (a late
        # record is older than the observed time: nothing to advance).
        observed = max(raw.observed_ms, ts)
        size = windows.size_ms
        if size == windows.advance_ms:  # tumbling: one window, no Assignment to build
            start = ts - ts % size
            starts: Iterable[int] = () if start < windows.close_bound(observed) else (start,)
        else:
            starts = [w.start_ms for w in windows.assign(ts, observed).open]
        values, late = self._values, True
        for start in starts:
            late = False
            stored = raw.get_window(raw_key, start)
            if stored is None:
                aggregate, max_ts = self._initializer(), ts
            else:
                try:
                    aggregate = values.fast_decode(stored.value)
                except Exception:
                    aggregate = values.decode(stored.value)
                max_ts = max(stored.max_ts_ms, ts)
            aggregate = self._aggregator(key, value, aggregate)
            raw.put_window(raw_key, start, self._encode(aggregate), ts, max_ts_ms=max_ts)
            if not self.final:
                self._emit(ctx, key, start, start + size, aggregate, max_ts)
        if late:
            self._late(raw, ctx)

    def _tumbling(
        self, ctx: ProcessorContext, raw: Any, key: Any, raw_key: bytes, value: Any, ts: int
    ) -> None:
        """:meth:`_fixed` for tumbling windows, the profile's hot path: the window's key
        bytes made once and handed back to the store, the miss not cached
        (``FixedWindowStore.stored_window``), the aggregate encoded without the copy
        ``_encode`` makes (the stored value copies it anyway). Property-tested equal to
        :meth:`_fixed` (tests/property/test_tumbling_fast_path.py)."""
        size = self._size
        start = ts - ts % size
        observed = raw.observed_ms
        if start < (ts if ts > observed else observed) - self._close_lag:
            self._late(raw, ctx)  # the window closed: its close bound (windows.py) is past it
            return
        stored_key = raw.window_key(start, raw_key)
        stored = raw.stored_window(stored_key, start)
        if stored is None:
            aggregate, max_ts = self._initializer(), ts
        else:
            max_ts, data = raw.split_stored(stored)
            values = self._values
            try:
                aggregate = values.fast_decode(data)
            except Exception:
                aggregate = values.decode(data)
            if max_ts < ts:
                max_ts = ts
        aggregate = self._aggregator(key, value, aggregate)
        try:  # the codec's rule inline, as _encode: None first
            data = None if aggregate is None else self._store_encode(aggregate)
        except Exception:
            data = self._values.encode(aggregate)
        if data is None:
            data = self._encode(aggregate)  # raises the error naming the aggregation
        raw.put_stored(stored_key, start, max_ts, data, ts)
        if not self.final:
            self._emit(ctx, key, start, start + size, aggregate, max_ts)

    def _session(
        self,
        ctx: ProcessorContext,
        raw: Any,
        windows: SessionWindows,
        key: Any,
        raw_key: bytes,
        value: Any,
        ts: int,
    ) -> None:
        if windows.is_late(ts, raw.observed_ms):
            # Over gap + grace behind: it could reach back to a session past retention,
            # which the store no longer shows, so it is late whatever it would merge with.
            self._late(raw, ctx)
            return
        earliest_end, latest_start = windows.search_bounds(ts)
        found = {
            Window(s.start_ms, s.end_ms): s.value
            for s in raw.find_sessions(raw_key, earliest_end, latest_start)
        }
        merge = sessions.assign(ts, found, windows, raw.observed_ms)
        if merge is None:
            self._late(raw, ctx)
            return
        aggregate: Any = None
        merger = self._merger
        assert merger is not None
        for replaced in merge.replaced:
            each = self._values.decode(found[replaced])
            aggregate = each if aggregate is None else merger(key, aggregate, each)
        if aggregate is None:
            aggregate = self._initializer()
        aggregate = self._aggregator(key, value, aggregate)
        session = merge.session
        for replaced in merge.replaced:
            raw.remove_session(raw_key, replaced.start_ms, replaced.end_ms)
            if not self.final and replaced != session:
                ctx.forward(Windowed(key, replaced.start_ms, replaced.end_ms), None)
        raw.put_session(raw_key, session.start_ms, session.end_ms, self._encode(aggregate), ts)
        if not self.final:
            self._emit(ctx, key, session.start_ms, session.end_ms, aggregate, session.end_ms)

    def _sliding(
        self,
        ctx: ProcessorContext,
        raw: Any,
        windows: SlidingWindows,
        key: Any,
        raw_key: bytes,
        value: Any,
        ts: int,
    ) -> None:
        if windows.is_late(ts, raw.observed_ms):
            self._late(raw, ctx)
            return
        d = windows.time_difference_ms
        found = {
            Window(s.start_ms, s.end_ms): s for s in raw.find_sessions(raw_key, ts - d, ts + 1)
        }
        plan = sliding.plan(ts, _as_stored(found.values()), d)
        if self.final and sliding.touches_unemitted_closed(
            plan, windows, raw.observed_ms, raw.last_emitted_close or 0
        ):
            self._emit_closed(ctx, raw)
        for write in plan:
            base = None if write.base is None else found.get(write.base)
            aggregate = self._initializer() if base is None else self._values.decode(base.value)
            if write.add_record:
                aggregate = self._aggregator(key, value, aggregate)
            window = write.window
            raw.put_session(
                raw_key,
                window.start_ms,
                window.end_ms,
                self._encode(aggregate),
                ts,
                max_ts_ms=write.max_ts,
            )
            if not self.final and not windows.is_closed(window, raw.observed_ms):
                self._emit(ctx, key, window.start_ms, window.end_ms, aggregate, write.max_ts)


def uses_fast_path(windows: Windows) -> bool:
    """Whether an aggregation over ``windows`` takes :meth:`WindowedAggregation._tumbling`
    (tests patch this to run the plain path beside it)."""
    return isinstance(windows, TimeWindows) and windows.size_ms == windows.advance_ms


def _as_stored(found: Iterable[_Stored]) -> list[sliding.Stored]:
    return [sliding.Stored(Window(s.start_ms, s.end_ms), s.max_ts_ms) for s in found]
