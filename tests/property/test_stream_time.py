"""Stream time against a model: the largest valid timestamp processed, never decreasing,
whatever order the timestamps come in and whatever invalid ones are skipped."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fakes import FakeCollector
from tests.support.feeding import feed
from worker.clock import FakeClock
from worker.observability import Metrics, get_logger
from worker.processing import ProcessorContext, Topology
from worker.processing.graph import TaskGraph
from worker.processing.handlers import ExceptionPolicy, RecordErrorHandler
from worker.serde import BYTES


def graph(seen: list[int]) -> TaskGraph:
    def proc(ctx: ProcessorContext, key: Any, value: Any) -> None:
        seen.append(ctx.stream_time)

    (subtopology,) = (
        Topology()
        .add_source("in", "input", key_serde=BYTES, value_serde=BYTES)
        .add_processor("p", proc, parents=["in"])
        .build()
        .subtopologies
    )
    policy = ExceptionPolicy.LOG_AND_CONTINUE
    errors = RecordErrorHandler(
        "0_0", policy, policy, "dlq", FakeCollector(), Metrics(), FakeClock(), get_logger()
    )
    return TaskGraph(subtopology, "0_0", {}, FakeCollector(), errors)


@given(st.lists(st.integers(min_value=-5, max_value=10**13), max_size=60))
def test_stream_time_is_the_running_max_of_valid_timestamps_and_never_decreases(
    timestamps: list[int],
) -> None:
    seen: list[int] = []
    task_graph = graph(seen)
    observed = []

    for offset, timestamp in enumerate(timestamps):
        feed(task_graph, "input", 0, offset, timestamp, b"k", b"v")
        observed.append(task_graph.context.stream_time)

    expected, model = [], -1
    for timestamp in timestamps:
        if timestamp >= 0:
            model = max(model, timestamp)
        expected.append(model)
    assert observed == expected
    assert all(a <= b for a, b in zip(observed, observed[1:], strict=False))
    assert seen == [model for model, t in zip(expected, timestamps, strict=True) if t >= 0]
