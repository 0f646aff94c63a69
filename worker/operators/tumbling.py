"""Tumbling-window aggregation: one window per record, ``[ts - ts % size, + size)``.

The windowed benchmark's hot path (docs/benchmarks.md, "Windowed count and sum"): the
window's key bytes are made once and handed back to the store, the miss is not cached
(``FixedWindowStore.stored_window``), and the aggregate is encoded without the copy a
kept codec makes (the stored value copies it anyway). tests/property/test_window_operators.py
holds it to the reference model of fixed windows.
"""

from __future__ import annotations

from typing import Any

from worker.errors import TopologyError
from worker.operators.windowed import Aggregator, FixedWindowAggregation, Initializer
from worker.processing.context import ProcessorContext
from worker.processing.windows import TimeWindows
from worker.serde import Codec, Serde
from worker.state.contracts import RawWindowStore


class TumblingAggregation(FixedWindowAggregation):
    """A windowed aggregation over tumbling windows (``advance_ms == size_ms``)."""

    def __init__(
        self,
        name: str,
        windows: TimeWindows,
        initializer: Initializer,
        aggregator: Aggregator,
        emit: str,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        """Raises:
        TopologyError: as :class:`WindowedAggregation`, or windows that hop.
        """
        super().__init__(name, windows, initializer, aggregator, emit, key_serde, value_serde)
        if windows.advance_ms != windows.size_ms:
            raise TopologyError(f"aggregation {name!r}: tumbling windows do not hop")
        self._size = windows.size_ms
        # a window starting below ``observed - _close_lag`` is closed (TimeWindows.close_bound)
        self._close_lag = windows.size_ms + windows.grace_ms - 1
        # not kept: the store copies the bytes into the stored value
        self._stored_values = Codec(value_serde)

    def fold(
        self, ctx: ProcessorContext, store: RawWindowStore, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Fold one record into its window, or count it late when that has closed."""
        ts = ctx.timestamp
        size = self._size
        start = ts - ts % size
        observed = store.observed_ms
        if start < (ts if ts > observed else observed) - self._close_lag:
            self.late(store)  # the window closed: its close bound (windows.py) is past it
            return
        stored_key = store.window_key(start, raw_key)
        stored = store.stored_window(stored_key, start)
        if stored is None:
            aggregate, max_ts = self._initializer(), ts
        else:
            max_ts, old = store.split_stored(stored)
            aggregate = self._values.decode(old)
            if max_ts < ts:
                max_ts = ts
        aggregate = self._aggregator(key, value, aggregate)
        data = None if aggregate is None else self._stored_values.encode(aggregate)
        if data is None:
            data = self.encode(aggregate)  # raises the error naming the aggregation
        store.put_stored(stored_key, start, max_ts, data, ts)
        if not self.final:
            self.emit(ctx, key, start, start + size, aggregate, max_ts)
