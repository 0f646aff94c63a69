"""Windowed aggregations through the task graph against reference models, in both emit
modes, with records in any order (late ones included) and a commit and restart anywhere.

The models (tests/support/window_models.py) are written from the definitions, not from
the operator. Emit-final sends each window whose close time stream time has passed, once,
with every record it accepted; emit-update sends each accepted record's new aggregate.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.aggregating import Running, listing
from tests.support.window_models import (
    closed_windows,
    fixed_model,
    session_model,
    sliding_model,
)
from worker.processing.built_topology import BuiltTopology
from worker.processing.windows import hopping, session, sliding
from worker.windowed_serde import Windowed

records = st.lists(
    # on a coarse grid, so that records land on window bounds and close times
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40).map(lambda t: t * 1000)),
    max_size=30,
)


def run(
    built: BuiltTopology, recs: list[tuple[str, int]], restart_at: int
) -> tuple[list[Any], float]:
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


def check_final(
    outputs: list[Any],
    contents: dict[Windowed[str], list[int]],
    stream_time: int,
    close_time: Callable[[Windowed[str]], int],
) -> None:
    """Emit-final sent each window closed at the end once, with every record it accepted."""
    assert len(outputs) == len({w for w, _v in outputs})  # each window once
    assert dict(outputs) == closed_windows(contents, stream_time, close_time)


@settings(max_examples=60, deadline=None)
@given(
    records,
    st.integers(0, 30),
    st.sampled_from([(10_000, 10_000), (10_000, 5_000), (9_000, 3_000)]),
    st.integers(0, 6).map(lambda t: t * 1000),
)
def test_fixed_windows_match_the_model(
    recs: list[tuple[str, int]], restart_at: int, shape: tuple[int, int], grace: int
) -> None:
    windows = hopping(shape[0], shape[1], grace_ms=grace)
    updates, contents, late, stream_time = fixed_model(windows, recs)

    outputs, counted = run(listing(windows, "update"), recs, restart_at)
    assert outputs == updates
    assert counted == late

    outputs, counted = run(listing(windows, "final"), recs, restart_at)
    check_final(outputs, contents, stream_time, lambda w: w.end_ms - 1 + grace)
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
    recs: list[tuple[str, int]], restart_at: int, gap: int, grace: int
) -> None:
    windows = session(gap, grace_ms=grace)
    updates, contents, late, stream_time = session_model(windows, recs)

    outputs, counted = run(listing(windows, "update"), recs, restart_at)
    assert outputs == updates
    assert counted == late

    outputs, counted = run(listing(windows, "final"), recs, restart_at)
    check_final(outputs, contents, stream_time, lambda w: w.end_ms + gap + grace)
    assert counted == late


@settings(max_examples=60, deadline=None)
@given(
    records,
    st.integers(0, 30),
    st.integers(1, 5).map(lambda t: t * 1000),
    st.integers(0, 6).map(lambda t: t * 1000),
)
# 1000 is accepted after [0, 5000] closed: in the windows it shares with 12000, not in that one
@example([("a", 0), ("a", 12_000), ("a", 1_000)], 3, 5_000, 6_000)
# 4000 is accepted, and makes 0's right window [1, 5001] when it has closed: never emitted
@example([("a", 0), ("b", 8_000), ("a", 4_000)], 3, 5_000, 0)
def test_sliding_final_results_match_the_model(
    recs: list[tuple[str, int]], restart_at: int, difference: int, grace: int
) -> None:
    windows = sliding(difference, grace_ms=grace)
    contents, late, stream_time = sliding_model(windows, recs)

    outputs, counted = run(listing(windows, "final"), recs, restart_at)

    check_final(outputs, contents, stream_time, lambda w: w.end_ms + grace)
    assert counted == late
