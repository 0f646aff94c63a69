"""Windowed aggregations through the task graph: update and final emits, late records,
output keys, timestamps and headers, restarts, and the definitions' errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.aggregating import Running
from worker.errors import TopologyError
from worker.events import RECORD_LATE
from worker.processing.built_topology import BuiltTopology
from worker.processing.topology import Topology
from worker.processing.windows import InvalidWindow, Windows, hopping, session, sliding, tumbling
from worker.serde import JSON, STR, SerdeError
from worker.windowed_serde import Windowed, WindowedSerde

SECOND = 1000


def counting(windows: Windows, emit: str, merger: Any = None) -> BuiltTopology:
    """``count`` counts records per key and window; its outputs go to topic ``out``."""
    return (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_windowed_aggregation(
            "count",
            ["in"],
            windows,
            initializer=lambda: 0,
            aggregator=lambda key, value, n: n + 1,
            merger=merger,
            emit=emit,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_sink("out", "out", ["count"], WindowedSerde(STR), JSON)
        .build()
    )


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Any]:
    opened: list[Running] = []

    def start(built: BuiltTopology) -> Running:
        running = Running(built, tmp_path)
        opened.append(running)
        return running

    yield start
    for running in opened:
        running.close()


def test_emit_update_forwards_each_new_aggregate_with_windowed_keys(run: Any) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=0), "update"))
    agg.feed_all([("a", 1, 1_000), ("a", 1, 2_000), ("b", 1, 3_000), ("a", 1, 12_000)])

    assert [(o.key, o.value, o.timestamp) for o in agg.outputs()] == [
        (Windowed("a", 0, 10_000), 1, 1_000),
        (Windowed("a", 0, 10_000), 2, 2_000),
        (Windowed("b", 0, 10_000), 1, 3_000),
        (Windowed("a", 10_000, 20_000), 1, 12_000),
    ]


def test_an_output_timestamp_is_the_largest_contributing_timestamp(run: Any) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=5 * SECOND), "update"))
    agg.feed_all([("a", 1, 5_000), ("a", 1, 3_000)])

    assert [o.timestamp for o in agg.outputs()] == [5_000, 5_000]


def test_hopping_updates_every_window_containing_the_record(run: Any) -> None:
    agg = run(counting(hopping(10 * SECOND, 5 * SECOND, grace_ms=0), "update"))
    agg.feed("a", 1, 7_000)

    assert [o.key for o in agg.outputs()] == [
        Windowed("a", 0, 10_000),
        Windowed("a", 5_000, 15_000),
    ]


def test_late_records_are_dropped_and_counted(run: Any) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=2 * SECOND), "update"))
    agg.feed_all([("a", 1, 1_000), ("a", 1, 11_500), ("a", 1, 9_000)])  # 2.5 s late: in grace
    agg.feed_all([("a", 1, 12_000), ("a", 1, 9_999)])  # 2.001 s late: closed

    assert [o.value for o in agg.outputs() if o.key.start_ms == 0] == [1, 2]
    assert agg.late_records("count") == 1


def test_late_records_are_logged_with_key_and_lateness_at_most_once_a_second(run: Any) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=2 * SECOND), "update"))
    agg.feed_all([("a", 1, 12_000)])

    with capture_logs() as logs:
        agg.feed_all([("b", 1, 9_999), ("c", 1, 5_000)])  # both late, within one second

    (line,) = [e for e in logs if e["event"] == RECORD_LATE]
    assert line["key"] == "b" and line["late_ms"] == 2_001 and "partition" in line
    assert agg.late_records("count") == 2


def test_emit_final_forwards_each_window_once_when_stream_time_passes_end_plus_grace(
    run: Any,
) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=2 * SECOND), "final"))
    agg.feed_all([("a", 1, 1_000), ("b", 1, 4_000), ("a", 1, 9_000), ("a", 1, 11_999)])
    assert agg.outputs() == []

    agg.feed("c", 1, 12_000)  # closes [0, 10s) for every key, also those with no new record
    agg.feed("c", 1, 30_000)

    outputs = agg.outputs()
    assert [(o.key, o.value, o.timestamp, o.headers) for o in outputs] == [
        (Windowed("a", 0, 10_000), 2, 9_000, []),
        (Windowed("b", 0, 10_000), 1, 4_000, []),
        (Windowed("a", 10_000, 20_000), 1, 11_999, []),
        (Windowed("c", 10_000, 20_000), 1, 12_000, []),
    ]


def test_emit_final_records_its_progress_so_a_restart_emits_nothing_twice(
    run: Any, tmp_path: Path
) -> None:
    built = counting(tumbling(10 * SECOND, grace_ms=0), "final")
    first = run(built)
    first.feed_all([("a", 1, 1_000), ("a", 1, 10_000)])
    assert [o.key.start_ms for o in first.outputs()] == [0]
    first.commit()
    first.close()

    second = Running(built, tmp_path)
    try:
        second.feed_all([("a", 1, 15_000), ("a", 1, 20_000)])
        assert [(o.key.start_ms, o.value) for o in second.outputs()] == [(10_000, 2)]
    finally:
        second.close()


def test_uncommitted_emit_progress_is_redone_after_a_crash(run: Any, tmp_path: Path) -> None:
    built = counting(tumbling(10 * SECOND, grace_ms=0), "final")
    first = run(built)
    first.feed("a", 1, 1_000)
    first.commit()
    first.feed("a", 1, 10_000)  # emits [0, 10s), then the task dies before its commit
    first.close()

    second = Running(built, tmp_path)
    try:
        second.feed("a", 1, 10_000)  # the replay
        assert [(o.key.start_ms, o.value) for o in second.outputs()] == [(0, 1)]
    finally:
        second.close()


def test_an_emit_final_window_outlives_its_retention_until_it_is_emitted(run: Any) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=0), "final"))
    agg.feed("a", 1, 1_000)
    raw = agg.stores["count"]
    raw.advance(100_000)  # far past retention, with no punctuation in between
    agg.feed("b", 1, 100_000)

    assert [(o.key, o.value) for o in agg.outputs()][0] == (Windowed("a", 0, 10_000), 1)


def test_session_updates_send_tombstones_for_merged_sessions(run: Any) -> None:
    merge = lambda key, a, b: a + b  # noqa: E731
    agg = run(counting(session(5 * SECOND, grace_ms=10 * SECOND), "update", merger=merge))
    agg.feed_all([("a", 1, 1_000), ("a", 1, 10_000), ("a", 1, 5_500)])

    assert [(o.key, o.value) for o in agg.outputs()] == [
        (Windowed("a", 1_000, 1_000), 1),
        (Windowed("a", 10_000, 10_000), 1),
        (Windowed("a", 1_000, 1_000), None),
        (Windowed("a", 10_000, 10_000), None),
        (Windowed("a", 1_000, 10_000), 3),
    ]
    assert agg.outputs()[-1].timestamp == 10_000


def test_session_final_results_come_once_the_gap_and_grace_have_passed(run: Any) -> None:
    merge = lambda key, a, b: a + b  # noqa: E731
    agg = run(counting(session(5 * SECOND, grace_ms=1_000), "final", merger=merge))
    agg.feed_all([("a", 1, 1_000), ("a", 1, 3_000), ("b", 1, 4_000), ("c", 1, 8_000)])
    assert agg.outputs() == []
    agg.feed("c", 1, 12_000)  # past 3 s + 5 s + 1 s for a; b's end 4 s + 6 s = 10 s < 12 s

    assert [(o.key, o.value) for o in agg.outputs()] == [
        (Windowed("a", 1_000, 3_000), 2),
        (Windowed("b", 4_000, 4_000), 1),
    ]


def test_a_session_record_reaching_a_closed_session_is_late(run: Any) -> None:
    merge = lambda key, a, b: a + b  # noqa: E731
    agg = run(counting(session(5 * SECOND, grace_ms=0), "final", merger=merge))
    agg.feed_all([("a", 1, 1_000), ("b", 1, 6_500), ("a", 1, 6_000)])

    assert agg.late_records("count") == 1
    assert [(o.key, o.value) for o in agg.outputs()] == [(Windowed("a", 1_000, 1_000), 1)]


def test_sliding_windows_hold_the_records_within_the_time_difference(run: Any) -> None:
    agg = run(counting(sliding(5 * SECOND, grace_ms=0), "update"))
    agg.feed_all([("a", 1, 10_000), ("a", 1, 12_000)])

    assert [(o.key, o.value) for o in agg.outputs()] == [
        (Windowed("a", 5_000, 10_000), 1),
        (Windowed("a", 7_000, 12_000), 2),
        (Windowed("a", 10_001, 15_001), 1),
    ]


def test_sliding_final_results_come_once_each(run: Any) -> None:
    agg = run(counting(sliding(5 * SECOND, grace_ms=0), "final"))
    agg.feed_all([("a", 1, 10_000), ("a", 1, 12_000), ("a", 1, 30_000)])

    assert sorted((o.key.start_ms, o.key.end_ms, o.value) for o in agg.outputs()) == [
        (5_000, 10_000, 1),
        (7_000, 12_000, 2),
        (10_001, 15_001, 1),
    ]


def test_records_without_a_key_or_value_are_skipped(run: Any) -> None:
    agg = run(counting(tumbling(10 * SECOND, grace_ms=0), "update"))
    agg.feed(None, 1, 1_000)
    agg.feed("a", None, 1_000)

    assert agg.outputs() == []


@pytest.mark.parametrize(
    ("windows", "merger", "emit", "message"),
    [
        (tumbling(1000, grace_ms=0), None, "sometimes", "emit must be"),
        (session(1000, grace_ms=0), None, "final", "merger is required"),
        (tumbling(1000, grace_ms=0), lambda k, a, b: a, "final", "merger is required"),
    ],
)
def test_bad_aggregations_are_topology_errors(
    windows: Windows, merger: Any, emit: str, message: str
) -> None:
    with pytest.raises(TopologyError, match=message):
        counting(windows, emit, merger)


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: hopping(1000, 2000, grace_ms=0), "advance_ms"),
        (lambda: tumbling(1000, grace_ms=-1), "grace_ms"),
        (lambda: tumbling(1000, grace_ms=500, retention_ms=1200), "retention_ms"),
        (lambda: session(1000, grace_ms=-5), "grace_ms"),
    ],
)
def test_bad_window_definitions_name_the_key(build: Any, key: str) -> None:
    with pytest.raises(InvalidWindow) as bad:
        counting(build(), "final")
    assert bad.value.key == key
    assert key in str(bad.value)


def test_an_aggregate_that_encodes_to_nothing_is_a_serde_error(run: Any) -> None:
    built = (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_windowed_aggregation(
            "none",
            ["in"],
            tumbling(1000, grace_ms=0),
            initializer=lambda: 0,
            aggregator=lambda key, value, n: None,
            emit="update",
            key_serde=STR,
            value_serde=JSON,
        )
        .build()
    )
    agg = run(built)
    with pytest.raises(SerdeError, match="'none'.*encodes to nothing"):
        agg.feed("a", 1, 1_000)
