"""The tumbling-window fast path (``WindowedAggregation._tumbling``) against the plain path
(``_fixed``) over the same records: equal outputs, late counts, changelog writes and
committed stores, in both emit modes, with late records, window bounds, commits anywhere
and a restart.

The plain path is the one every hopping window takes; the model test
(test_aggregation_model.py) holds it to the definitions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.aggregating import Running
from worker.processing import aggregations
from worker.processing.topology import BuiltTopology, Topology
from worker.processing.windows import tumbling
from worker.serde import JSON, STR
from worker.windowed_serde import WindowedSerde

# (key, timestamp, commit after this record); a coarse grid so records land on window
# bounds and close times, and far jumps so windows expire and ranges are deleted.
records = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "\x00d"]),
        st.one_of(
            st.integers(0, 40).map(lambda t: t * 1000),
            st.integers(0, 400_000),
        ),
        st.booleans(),
    ),
    max_size=40,
)


def build(size: int, grace: int, emit: str) -> BuiltTopology:
    return (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_windowed_aggregation(
            "agg",
            ["in"],
            tumbling(size, grace_ms=grace),
            initializer=lambda: {"count": 0, "sum": 0, "seen": []},
            aggregator=lambda key, ts, agg: {
                "count": agg["count"] + 1,
                "sum": agg["sum"] + ts,
                "seen": sorted([*agg["seen"], ts]),
            },
            emit=emit,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_sink("out", "out", ["agg"], WindowedSerde(STR), JSON)
        .build()
    )


def run(built: BuiltTopology, recs: list[tuple[str, int, bool]], restart_at: int) -> Any:
    """Everything observable: outputs with their timestamps, the writes each commit
    buffered (what the changelog gets), the committed store, the late count."""
    with tempfile.TemporaryDirectory() as root:
        outputs: list[Any] = []
        commits: list[Any] = []
        late = 0.0
        stored: list[Any] = []
        for part in (recs[:restart_at], recs[restart_at:]):
            task = Running(built, Path(root))
            store = task.stores["agg"]
            try:
                for key, ts, commit in part:
                    task.feed(key, ts, ts)
                    if commit:
                        commits.append((dict(store.pending()), dict(store.pending_times())))
                        task.commit()
                commits.append((dict(store.pending()), dict(store.pending_times())))
                task.commit()
                outputs += [(o.key, o.value, o.timestamp) for o in task.outputs()]
                late += task.late_records("agg")
                stored = list(store.iter_committed())
            finally:
                task.close()
        return outputs, commits, stored, late


@settings(max_examples=80, deadline=None)
@given(
    records,
    st.integers(0, 40),
    st.sampled_from([1_000, 10_000, 60_000]),
    st.integers(0, 6).map(lambda t: t * 1000),
    st.sampled_from(["update", "final"]),
)
def test_the_fast_path_equals_the_plain_path(
    recs: list[tuple[str, int, bool]], restart_at: int, size: int, grace: int, emit: str
) -> None:
    fast = run(build(size, grace, emit), recs, restart_at)
    with mock.patch.object(aggregations, "uses_fast_path", return_value=False):
        plain_topology = build(size, grace, emit)
    (node,) = plain_topology.subtopologies[0].processors
    assert not node.fn.__self__._tumbling_fast  # type: ignore[attr-defined]
    assert run(plain_topology, recs, restart_at) == fast
