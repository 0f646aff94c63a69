"""What every windowed aggregation shares: its functions, codecs, emits and emit-final step.

One operator per window kind (:mod:`.tumbling`, :mod:`.hopping`, :mod:`.sliding`,
:mod:`.session`), each with a windowed store of its own name (fixed windows for tumbling
and hopping, the session layout for sessions and sliding windows). Per record, each:

1. raises the store's observed time to the record's timestamp (it counts even when the
   record turns out late, as in ``worker.processing.windows``: the operator's observed
   time includes the current record; for fixed windows the window's write does it);
2. finds the windows the record updates; none open: the record is *late*, dropped and
   counted (``worker_late_records_total{task,processor}``, through the store's events);
3. folds it into each window at the record's timestamp, storing the window's largest
   record time, which is the output's timestamp (reference §6.2);
4. ``emit="update"``: forwards ``Windowed(key, start, end)`` with the new aggregate.

``emit="final"``: a stream-time punctuator (:meth:`WindowedAggregation.init`) raises the
observed time to the task's stream time, scans the store for the windows closed since the
last emission (``last_emitted_close`` up to the close bound: a key range of the store,
never a memory buffer), forwards each once with no headers, then records the new bound
with ``mark_emitted``. The bound, the observed time and the outputs join the task's
commit, so under exactly-once a crash before the commit replays the step and a crash after
it never repeats it; the store holds a window until that bound passes it
(``hold_until_emitted``). A closed window takes no more writes (the record is late for it),
so its final result cannot change after the scan (sliding windows are the exception, see
:mod:`.sliding`).

Records with a None key (or one its serde writes as no bytes) or a None value are
skipped, as Kafka Streams' aggregations do. An operator is shared by every task of the
topology: per-task state lives in the task's store only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

from worker.errors import TopologyError
from worker.processing.context import ProcessorContext
from worker.processing.windows import SessionWindows, SlidingWindows, TimeWindows, Windows
from worker.serde import Codec, Serde, SerdeError
from worker.state.contracts import (
    RawSessionStore,
    RawWindowedStore,
    RawWindowStore,
    StoredWindow,
)
from worker.windowed_serde import Windowed

Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]  # (key, value, aggregate) -> aggregate
Merger = Callable[[Any, Any, Any], Any]  # (key, aggregate, aggregate) -> aggregate
EMIT_MODES = ("update", "final")
# Sessions and sliding windows close at any instant: emit-final checks this often (in
# stream time, or every gap / time difference when that is shorter).
SESSION_EMIT_INTERVAL_MS = 1_000
_NO_HEADERS: list[tuple[str, bytes]] = []

StoreT = TypeVar("StoreT", bound=RawWindowedStore)
WindowsT = TypeVar("WindowsT", bound=Windows)


class WindowedAggregation(Generic[StoreT, WindowsT]):
    """A windowed aggregation's processor (:meth:`process`) and, for ``emit="final"``, its
    punctuator (registered by :meth:`init`). A kind supplies :meth:`fold`,
    :meth:`emit_schedule` and :meth:`closed_windows`."""

    def __init__(
        self,
        name: str,
        windows: WindowsT,
        initializer: Initializer,
        aggregator: Aggregator,
        emit: str,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        """Raises:
        TopologyError: ``emit`` is not ``"update"`` or ``"final"``, or a function is not
            callable.
        """
        check_functions(name, emit, initializer, aggregator)
        self.name = name
        self.windows = windows
        self.final = emit == "final"
        self._initializer = initializer
        self._aggregator = aggregator
        self._keys = Codec(key_serde, kept=True)
        self._values = Codec(value_serde, kept=True)

    # -- what a kind supplies -------------------------------------------------------

    def fold(
        self, ctx: ProcessorContext, store: StoreT, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Fold one record (at ``ctx.timestamp``, key and value not None, ``raw_key`` the
        key's bytes) into its windows, or count it late."""
        raise NotImplementedError

    def emit_schedule(self) -> tuple[int, int]:
        """(interval, phase) in stream time of emit-final's punctuator."""
        raise NotImplementedError

    def closed_windows(self, store: StoreT, from_ms: int, to_ms: int) -> Iterator[StoredWindow]:
        """The windows emit-final forwards for close times in ``[from_ms, to_ms]``, oldest
        first, closed ones included (``live_only=False``)."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------

    def store(self, ctx: ProcessorContext) -> StoreT:
        """The current task's store of this aggregation (the byte-level one)."""
        return cast(StoreT, ctx.current_node.stores[self.name].raw)

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        """The processor function: :meth:`fold` for a record with a key (one its serde
        writes as bytes) and a value; others are skipped."""
        if value is None:
            return
        raw_key = None if key is None else self._keys.encode(key)
        if raw_key is None:
            return
        self.fold(ctx, ctx.current_node.stores[self.name].raw, key, raw_key, value)

    def encode(self, aggregate: Any) -> bytes:
        """The aggregate's bytes. Raises SerdeError naming the aggregation when it
        encodes to nothing."""
        data = None if aggregate is None else self._values.encode(aggregate)
        if data is None:
            raise SerdeError(
                f"aggregation {self.name!r}: aggregate {aggregate!r} encodes to nothing"
            )
        return data

    def decode(self, data: bytes) -> Any:
        """A stored aggregate."""
        return self._values.decode(data)

    def emit(
        self, ctx: ProcessorContext, key: Any, start: int, end: int, aggregate: Any, max_ts: int
    ) -> None:
        """Forward an updated window, at its largest record time."""
        windowed = Windowed(key, start, end)
        if max_ts == ctx.timestamp:  # the common case: the record is the window's latest
            ctx.forward(windowed, aggregate)
        else:
            ctx.forward(windowed, aggregate, timestamp=max_ts)

    def late(self, store: StoreT, ctx: ProcessorContext) -> None:
        """Count and log (throttled, by the store's events) a record dropped as late."""
        record = ctx.current_record
        late_ms = store.observed_ms - ctx.timestamp
        store.events.late_record(record.partition(), record.key(), late_ms)

    def init(self, ctx: ProcessorContext) -> None:
        """Register emit-final's punctuator (``add_processor(..., init=)``)."""
        interval, phase = self.emit_schedule()
        ctx.schedule(interval, "stream", self.emit_final, phase_ms=phase)

    def emit_final(self, ctx: ProcessorContext, now_ms: int) -> None:
        """Forward, once, every window closed at the task's stream time and not emitted
        yet, oldest first; then mark them emitted (same commit as the outputs)."""
        store = self.store(ctx)
        store.advance(max(now_ms, ctx.stream_time))
        self.emit_closed(ctx, store)

    def emit_closed(self, ctx: ProcessorContext, store: StoreT) -> None:
        """Emit-final's step at the store's observed time (see the module doc)."""
        bound = self.windows.close_bound(store.observed_ms)
        emitted = store.last_emitted_close or 0
        if bound <= emitted:
            return
        decode_key, decode_value = self._keys.decode, self._values.decode
        for stored in self.closed_windows(store, emitted, bound - 1):
            ctx.forward(
                Windowed(decode_key(stored.key), stored.start_ms, stored.end_ms),
                decode_value(stored.value),
                timestamp=stored.max_ts_ms,
                headers=_NO_HEADERS,
            )
        store.mark_emitted(bound)


class FixedWindowAggregation(WindowedAggregation[RawWindowStore, TimeWindows]):
    """Tumbling and hopping windows: a fixed-window store, emit-final at close times."""

    def emit_schedule(self) -> tuple[int, int]:
        return self.windows.emit_schedule()

    def closed_windows(
        self, store: RawWindowStore, from_ms: int, to_ms: int
    ) -> Iterator[StoredWindow]:
        return store.fetch_all_windows(from_ms, to_ms, live_only=False)


SessionShapedT = TypeVar("SessionShapedT", SessionWindows, SlidingWindows)


class SessionShapedAggregation(WindowedAggregation[RawSessionStore, SessionShapedT]):
    """Sessions and sliding windows: a session-shaped store (windows told apart by both
    bounds), windows that close at any instant. A kind supplies :meth:`reach_ms` and
    :meth:`fold_in_time`."""

    def reach_ms(self) -> int:
        """How far a record reaches in time (a session's gap, a sliding window's time
        difference): emit-final runs at least this often in stream time."""
        raise NotImplementedError

    def fold_in_time(
        self, ctx: ProcessorContext, store: RawSessionStore, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Fold a record that is not late (the store advanced to it) into its windows; it
        may still be late for all of them (then count it late)."""
        raise NotImplementedError

    def emit_schedule(self) -> tuple[int, int]:
        return min(SESSION_EMIT_INTERVAL_MS, self.reach_ms()), 0

    def fold(
        self, ctx: ProcessorContext, store: RawSessionStore, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Advance the store to the record; count it late when ``windows.is_late`` says
        so, else :meth:`fold_in_time`."""
        ts = ctx.timestamp
        store.advance(ts)
        if self.windows.is_late(ts, store.observed_ms):
            self.late(store, ctx)
            return
        self.fold_in_time(ctx, store, key, raw_key, value)

    def closed_windows(
        self, store: RawSessionStore, from_ms: int, to_ms: int
    ) -> Iterator[StoredWindow]:
        return store.fetch_all_sessions(from_ms, to_ms, live_only=False)


def check_functions(name: str, emit: str, *functions: object) -> None:
    """Raises TopologyError when ``emit`` is not a mode or a function is not callable."""
    if emit not in EMIT_MODES:
        raise TopologyError(f"aggregation {name!r}: emit must be 'update' or 'final'")
    for role, fn in zip(("initializer", "aggregator", "merger"), functions, strict=False):
        if not callable(fn):
            raise TopologyError(f"aggregation {name!r}: {role} is not callable")
