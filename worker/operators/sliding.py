"""Sliding-window aggregation (KIP-450): the writes a record makes are planned by
:func:`worker.processing.sliding.plan` and applied here.

Closed windows: an accepted record may still be late for some of its windows. Its writes
to those are applied (later plans build new windows from them) but never forwarded, and
with ``emit="final"`` they must not reach a final result: when the plan touches a closed
window not emitted yet (:func:`~worker.processing.sliding.touches_unemitted_closed`), the
emit-final step runs first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.operators.windowed import SessionShapedAggregation
from worker.processing import sliding
from worker.processing.context import ProcessorContext
from worker.processing.windows import SlidingWindows, Window
from worker.state.contracts import RawSessionStore, StoredWindow


class SlidingAggregation(SessionShapedAggregation[SlidingWindows]):
    """A windowed aggregation over sliding windows, kept in a session-shaped store."""

    def reach_ms(self) -> int:
        return self.windows.time_difference_ms

    def fold_in_time(
        self, ctx: ProcessorContext, store: RawSessionStore, key: Any, raw_key: bytes, value: Any
    ) -> None:
        """Apply the record's plan to the key's windows."""
        ts = ctx.timestamp
        windows = self.windows
        d = windows.time_difference_ms
        found = {
            Window(s.start_ms, s.end_ms): s for s in store.find_sessions(raw_key, ts - d, ts + 1)
        }
        plan = sliding.plan(ts, _as_stored(found.values()), d)
        if self.final and sliding.touches_unemitted_closed(
            plan, windows, store.observed_ms, store.last_emitted_close or 0
        ):
            self.emit_closed(ctx, store)
        for write in plan:
            base = None if write.base is None else found.get(write.base)
            aggregate = self._initializer() if base is None else self.decode(base.value)
            if write.add_record:
                aggregate = self._aggregator(key, value, aggregate)
            window = write.window
            store.put_session(
                raw_key,
                window.start_ms,
                window.end_ms,
                self.encode(aggregate),
                ts,
                max_ts_ms=write.max_ts,
            )
            if not self.final and not windows.is_closed(window, store.observed_ms):
                self.emit(ctx, key, window.start_ms, window.end_ms, aggregate, write.max_ts)


def _as_stored(found: Iterable[StoredWindow]) -> list[sliding.Stored]:
    return [sliding.Stored(Window(s.start_ms, s.end_ms), s.max_ts_ms) for s in found]
