"""Hopping-window aggregation: a record updates every window ``[start, start + size)``
that holds it and is still open (``TimeWindows.assign``), starts a multiple of the advance.
"""

from __future__ import annotations

from typing import Any

from worker.operators.windowed import FixedWindowAggregation
from worker.processing.context import ProcessorContext
from worker.state.contracts import RawWindowStore


class HoppingAggregation(FixedWindowAggregation):
    """A windowed aggregation over hopping windows (overlapping when the advance is
    smaller than the size)."""

    def fold(
        self, ctx: ProcessorContext, store: RawWindowStore, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Fold one record into each of its open windows, or count it late if none is."""
        ts = ctx.timestamp
        # The observed time with this record; put_window advances the store to it (a late
        # record is older than the observed time: nothing to advance).
        observed = max(store.observed_ms, ts)
        size, late = self.windows.size_ms, True
        for window in self.windows.assign(ts, observed).open:
            late = False
            start = window.start_ms
            stored = store.get_window(raw_key, start)
            if stored is None:
                aggregate, max_ts = self._initializer(), ts
            else:
                aggregate, max_ts = self.decode(stored.value), max(stored.max_ts_ms, ts)
            aggregate = self._aggregator(key, value, aggregate)
            store.put_window(raw_key, start, self.encode(aggregate), ts, max_ts_ms=max_ts)
            if not self.final:
                self.emit(ctx, key, start, start + size, aggregate, max_ts)
        if late:
            self.late(store)
