"""Sliding-window plans against the windows recomputed from every record."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.processing.sliding import Stored, plan
from worker.processing.windows import Window, sliding


def reference(record_times: list[int], d: int) -> dict[Window, list[int]]:
    """Every window of the key with the records inside it (KIP-450's definition)."""
    windows = set()
    for r in set(record_times):
        windows.add(sliding(d, grace_ms=0).left_window(r))
        if any(r < x <= r + 1 + d for x in record_times):
            windows.add(Window(r + 1, r + 1 + d))
    return {w: sorted(x for x in record_times if w.start_ms <= x <= w.end_ms) for w in windows}


def apply(store: dict[Window, tuple[int, list[int]]], ts: int, d: int) -> None:
    found = [Stored(window, max_ts) for window, (max_ts, _) in store.items()]
    writes = plan(ts, found, d)
    before = dict(store)
    for write in writes:
        records = [] if write.base is None else list(before[write.base][1])
        if write.add_record:
            records.append(ts)
        store[write.window] = (write.max_ts, sorted(records))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=25),
    st.integers(min_value=1, max_value=15),
)
@example([5, 2], 10)
@example([20, 12, 31, 25], 10)
def test_any_arrival_order_gives_the_windows_of_all_the_records(record_times, d) -> None:
    store: dict[Window, tuple[int, list[int]]] = {}
    for index, ts in enumerate(record_times):
        apply(store, ts, d)
        expected = reference(record_times[: index + 1], d)
        assert {w: records for w, (_, records) in store.items()} == expected
        assert all(max_ts == max(records) for max_ts, records in store.values())
