"""Each window kind's operator against the plain reference model of its windows
(tests/support/window_models.py, written from the definitions): outputs with their
timestamps (a window's largest record time), late counts, with commits anywhere and a
restart, in both emit modes.

The tumbling operator is the windowed benchmark's hot path: it gets a finer grid than
test_aggregation_model.py, far jumps (windows expire, ranges are deleted) and a key whose
bytes sort below the others.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.aggregating import Running, listing
from tests.support.window_models import closed_windows, fixed_model, session_model
from worker.operators import (
    HoppingAggregation,
    SessionAggregation,
    SlidingAggregation,
    TumblingAggregation,
)
from worker.processing.built_topology import BuiltTopology
from worker.processing.windows import (
    hopping,
    session,
    sliding,
    tumbling,
)

# (key, timestamp, commit after this record): a coarse grid so records land on window
# bounds and close times, and far jumps so windows expire.
records = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "\x00d"]),
        st.one_of(st.integers(0, 40).map(lambda t: t * 1000), st.integers(0, 400_000)),
        st.booleans(),
    ),
    max_size=40,
)


def run(
    built: BuiltTopology, recs: list[tuple[str, int, bool]], restart_at: int
) -> tuple[list[Any], float]:
    """Outputs as (key, value, timestamp) and the late count, committing where a record
    says so and reopening the task after ``restart_at`` records."""
    with tempfile.TemporaryDirectory() as root:
        outputs: list[Any] = []
        late = 0.0
        for part in (recs[:restart_at], recs[restart_at:]):
            task = Running(built, Path(root))
            try:
                for key, ts, commit in part:
                    task.feed(key, ts, ts)
                    if commit:
                        task.commit()
                task.commit()
                outputs += [(o.key, o.value, o.timestamp) for o in task.outputs()]
                late += task.late_records("agg")
            finally:
                task.close()
        return outputs, late


@settings(max_examples=80, deadline=None)
@given(
    records,
    st.integers(0, 40),
    st.sampled_from([1_000, 10_000, 60_000]),
    st.integers(0, 6).map(lambda t: t * 1000),
)
def test_the_tumbling_operator_equals_the_model(
    recs: list[tuple[str, int, bool]], restart_at: int, size: int, grace: int
) -> None:
    windows = tumbling(size, grace_ms=grace)
    plain = [(key, ts) for key, ts, _ in recs]
    updates, contents, late, stream_time = fixed_model(windows, plain)

    outputs, counted = run(listing(windows, "update"), recs, restart_at)
    assert outputs == [(w, v, max(v)) for w, v in updates]
    assert counted == late

    outputs, counted = run(listing(windows, "final"), recs, restart_at)
    closed = closed_windows(contents, stream_time, lambda w: w.end_ms - 1 + grace)
    assert sorted(outputs, key=repr) == sorted(
        ((w, v, max(v)) for w, v in closed.items()), key=repr
    )
    assert [w.start_ms for w, _v, _t in outputs] == sorted(w.start_ms for w, _v, _t in outputs)
    assert counted == late


@settings(max_examples=40, deadline=None)
@given(
    records,
    st.integers(0, 40),
    st.sampled_from([(10_000, 5_000), (9_000, 3_000)]),
    st.integers(0, 6).map(lambda t: t * 1000),
)
def test_the_hopping_operator_stamps_each_window_with_its_latest_record(
    recs: list[tuple[str, int, bool]], restart_at: int, shape: tuple[int, int], grace: int
) -> None:
    windows = hopping(shape[0], shape[1], grace_ms=grace)
    updates, _contents, late, _time = fixed_model(windows, [(k, ts) for k, ts, _ in recs])

    outputs, counted = run(listing(windows, "update"), recs, restart_at)

    assert outputs == [(w, v, max(v)) for w, v in updates]
    assert counted == late


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]), st.integers(0, 40).map(lambda t: t * 1000), st.booleans()
        ),
        max_size=30,
    ),
    st.integers(0, 30),
    st.integers(1, 5).map(lambda t: t * 1000),
    st.integers(0, 6).map(lambda t: t * 1000),
)
def test_the_session_operator_stamps_sessions_and_retractions(
    recs: list[tuple[str, int, bool]], restart_at: int, gap: int, grace: int
) -> None:
    windows = session(gap, grace_ms=grace)
    plain = [(k, ts) for k, ts, _ in recs]
    updates, _contents, late, _time = session_model(windows, plain)

    outputs, counted = run(listing(windows, "update"), recs, restart_at)

    # a retraction carries the time of the record that merged its session away
    assert [(w, v) for w, v, _t in outputs] == updates
    assert all(t == max(v) for _w, v, t in outputs if v is not None)
    assert counted == late


def test_each_window_kind_gets_its_own_operator() -> None:
    kinds = {
        TumblingAggregation: tumbling(1000, grace_ms=0),
        HoppingAggregation: hopping(1000, 500, grace_ms=0),
        SlidingAggregation: sliding(1000, grace_ms=0),
        SessionAggregation: session(1000, grace_ms=0),
    }
    for kind, windows in kinds.items():
        (node,) = listing(windows, "update").subtopologies[0].processors
        assert type(node.fn.__self__) is kind  # type: ignore[attr-defined]
