"""Windowed aggregations through the task graph against reference models, in both emit
modes, with records in any order (late ones included) and a commit and restart anywhere.

The models are written from the definitions (docs/windows.md §1, §3, §4), not from the
operator: a window accepts a record while the largest timestamp seen, the record's
included, is at most ``grace`` past the window's last instant; a record no window accepts
is late. Emit-final sends each window whose close time stream time has passed, once, with
every record it accepted; emit-update sends each accepted record's new aggregate.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.aggregating import Running
from worker.processing.topology import BuiltTopology, Topology
from worker.processing.windows import SessionWindows, TimeWindows, Windows, hopping, session
from worker.serde import JSON, STR
from worker.windowed_serde import Windowed, WindowedSerde

Record = tuple[str, int]  # key, timestamp

records = st.lists(
    # on a coarse grid, so that records land on window bounds and close times
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40).map(lambda t: t * 1000)),
    max_size=30,
)


def build(windows: Windows, emit: str) -> BuiltTopology:
    """Aggregates are the sorted lists of the timestamps of the window's records."""
    merger = (lambda key, a, b: sorted(a + b)) if isinstance(windows, SessionWindows) else None
    return (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_windowed_aggregation(
            "agg",
            ["in"],
            windows,
            initializer=list,
            aggregator=lambda key, ts, seen: sorted([*seen, ts]),
            merger=merger,
            emit=emit,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_sink("out", "out", ["agg"], WindowedSerde(STR), JSON)
        .build()
    )


def fixed_model(
    windows: TimeWindows, recs: list[Record]
) -> tuple[list[tuple[Windowed[str], list[int]]], dict[Windowed[str], list[int]], int, int]:
    """(update outputs, every window's records, late count, final stream time)."""
    observed, late = -1, 0
    updates: list[tuple[Windowed[str], list[int]]] = []
    contents: dict[Windowed[str], list[int]] = {}
    for key, ts in recs:
        observed = max(observed, ts)
        accepted = False
        start = ts - ts % windows.advance_ms
        starts = []
        while start >= 0 and start + windows.size_ms > ts:
            starts.append(start)
            start -= windows.advance_ms
        for start in sorted(starts):
            end = start + windows.size_ms
            if observed <= end - 1 + windows.grace_ms:
                accepted = True
                window = Windowed(key, start, end)
                contents[window] = sorted([*contents.get(window, []), ts])
                updates.append((window, contents[window]))
        late += not accepted
    return updates, contents, late, observed


def session_model(
    windows: SessionWindows, recs: list[Record]
) -> tuple[list[tuple[Windowed[str], Any]], dict[Windowed[str], list[int]], int, int]:
    observed, late = -1, 0
    updates: list[tuple[Windowed[str], Any]] = []
    contents: dict[Windowed[str], list[int]] = {}
    gap, grace = windows.gap_ms, windows.grace_ms

    def closed(window: Windowed[str]) -> bool:
        return observed > window.end_ms + gap + grace

    for key, ts in recs:
        observed = max(observed, ts)
        reached = sorted(
            (
                w
                for w in contents
                if w.key == key and w.end_ms >= ts - gap and w.start_ms <= ts + gap
            ),
            key=lambda w: (w.start_ms, w.end_ms),
        )
        merged = Windowed(
            key,
            min([ts] + [w.start_ms for w in reached]),
            max([ts] + [w.end_ms for w in reached]),
        )
        if closed(merged) or any(closed(w) for w in reached):
            late += 1
            continue
        times = sorted([ts] + [t for w in reached for t in contents.pop(w)])
        updates.extend((w, None) for w in reached if w != merged)
        contents[merged] = times
        updates.append((merged, times))
    return updates, contents, late, observed


def run(built: BuiltTopology, recs: list[Record], restart_at: int) -> tuple[list[Any], float]:
    """Outputs as (key, value) and the late count, committing and reopening the task
    after ``restart_at`` records."""
    with tempfile.TemporaryDirectory() as root:
        outputs: list[Any] = []
        late = 0.0
        for part in (recs[:restart_at], recs[restart_at:]):
            task = Running(built, Path(root))
            try:
                for key, ts in part:
                    task.feed(key, ts, ts)
                task.commit()
                outputs += [(o.key, o.value) for o in task.outputs()]
                late += task.late_records("agg")
            finally:
                task.close()
        return outputs, late


def closed_windows(
    contents: dict[Windowed[str], list[int]], stream_time: int, close_time: Any
) -> dict[Windowed[str], list[int]]:
    return {w: v for w, v in contents.items() if stream_time > close_time(w)}


@settings(max_examples=60, deadline=None)
@given(
    records,
    st.integers(0, 30),
    st.sampled_from([(10_000, 10_000), (10_000, 5_000), (9_000, 3_000)]),
    st.integers(0, 6).map(lambda t: t * 1000),
)
def test_fixed_windows_match_the_model(
    recs: list[Record], restart_at: int, shape: tuple[int, int], grace: int
) -> None:
    windows = hopping(shape[0], shape[1], grace_ms=grace)
    updates, contents, late, stream_time = fixed_model(windows, recs)

    outputs, counted = run(build(windows, "update"), recs, restart_at)
    assert outputs == updates
    assert counted == late

    outputs, counted = run(build(windows, "final"), recs, restart_at)
    expected = closed_windows(contents, stream_time, lambda w: w.end_ms - 1 + grace)
    assert len(outputs) == len({w for w, _v in outputs})  # each window once
    assert dict(outputs) == expected
    assert [w.start_ms for w, _v in outputs] == sorted(w.start_ms for w, _v in outputs)
    assert counted == late


@settings(max_examples=60, deadline=None)
@given(
    records,
    st.integers(0, 30),
    st.integers(1, 5).map(lambda t: t * 1000),
    st.integers(0, 6).map(lambda t: t * 1000),
)
def test_sessions_match_the_model(
    recs: list[Record], restart_at: int, gap: int, grace: int
) -> None:
    windows = session(gap, grace_ms=grace)
    updates, contents, late, stream_time = session_model(windows, recs)

    outputs, counted = run(build(windows, "update"), recs, restart_at)
    assert outputs == updates
    assert counted == late

    outputs, counted = run(build(windows, "final"), recs, restart_at)
    expected = closed_windows(contents, stream_time, lambda w: w.end_ms + gap + grace)
    assert len(outputs) == len({w for w, _v in outputs})
    assert dict(outputs) == expected
    assert counted == late
