"""Session-window aggregation: a record joins (and merges) the key's sessions within the
gap of it (:func:`worker.processing.sessions.assign`); the merged sessions' aggregates are
combined with the user's ``merger``, and with ``emit="update"`` each replaced session is
retracted (a None value) before the merged one is forwarded."""

from __future__ import annotations

from typing import Any

from worker.errors import TopologyError
from worker.operators.windowed import (
    Aggregator,
    Initializer,
    Merger,
    SessionShapedAggregation,
)
from worker.processing import sessions
from worker.processing.context import ProcessorContext
from worker.processing.windows import SessionWindows, Window
from worker.serde import Serde
from worker.state.contracts import RawSessionStore
from worker.windowed_serde import Windowed


class SessionAggregation(SessionShapedAggregation[SessionWindows]):
    """A windowed aggregation over session windows."""

    def __init__(
        self,
        name: str,
        windows: SessionWindows,
        initializer: Initializer,
        aggregator: Aggregator,
        merger: Merger,
        emit: str,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        """Raises:
        TopologyError: as :class:`WindowedAggregation`, or ``merger`` is not callable.
        """
        super().__init__(name, windows, initializer, aggregator, emit, key_serde, value_serde)
        if not callable(merger):
            raise TopologyError(f"aggregation {name!r}: merger is not callable")
        self._merger = merger

    def reach_ms(self) -> int:
        return self.windows.gap_ms

    def fold_in_time(
        self, ctx: ProcessorContext, store: RawSessionStore, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Merge the record into the key's sessions within the gap, or count it late.

        One over gap + grace behind was counted late before (:meth:`fold`): it could
        reach back to a session past retention, which the store no longer shows, so it
        is late whatever it would merge with."""
        ts = ctx.timestamp
        windows = self.windows
        earliest_end, latest_start = windows.search_bounds(ts)
        found = {
            Window(s.start_ms, s.end_ms): s.value
            for s in store.find_sessions(raw_key, earliest_end, latest_start)
        }
        merge = sessions.assign(ts, found, windows, store.observed_ms)
        if merge is None:
            self.late(store, ctx)
            return
        aggregate: Any = None
        for replaced in merge.replaced:
            each = self.decode(found[replaced])
            aggregate = each if aggregate is None else self._merger(key, aggregate, each)
        if aggregate is None:
            aggregate = self._initializer()
        aggregate = self._aggregator(key, value, aggregate)
        session = merge.session
        for replaced in merge.replaced:
            store.remove_session(raw_key, replaced.start_ms, replaced.end_ms)
            if not self.final and replaced != session:
                ctx.forward(Windowed(key, replaced.start_ms, replaced.end_ms), None)
        store.put_session(raw_key, session.start_ms, session.end_ms, self.encode(aggregate), ts)
        if not self.final:
            self.emit(ctx, key, session.start_ms, session.end_ms, aggregate, session.end_ms)
