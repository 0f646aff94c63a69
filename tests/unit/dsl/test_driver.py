"""The test driver itself: time, punctuators, reading outputs, configuration."""

from __future__ import annotations

import pytest

from worker.dsl import StreamsBuilder
from worker.errors import TopologyError
from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR
from worker.testing import TopologyTestDriver
from worker.testing.topics import NoRecords


def ticking() -> Topology:
    """Forwards a record per punctuation: stream time every 10 s, wall clock every 5 s."""

    def init(ctx: ProcessorContext) -> None:
        ctx.schedule(10_000, "stream", lambda c, now: c.forward("stream", now))
        ctx.schedule(5_000, "wall", lambda c, now: c.forward("wall", now))

    return (
        Topology()
        .add_source("in", "in", STR, JSON)
        .add_processor("tick", lambda ctx, k, v: None, ["in"], init=init)
        .add_sink("out", "out", ["tick"], STR, JSON)
    )


def test_punctuators_fire_on_stream_time_and_on_the_advanced_wall_clock() -> None:
    with TopologyTestDriver(ticking()) as d:
        out = d.output_topic("out")
        d.input_topic("in").pipe("k", 1, timestamp=25_000)
        assert [r.key for r in out.read_records()] == ["stream"]
        d.advance_wall_clock(4_000)
        assert out.read_records() == []
        d.advance_wall_clock(1_000)
        assert [r.key for r in out.read_records()] == ["wall"]


def test_reading_one_record_from_an_empty_output_raises_a_clear_error() -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    with TopologyTestDriver(b) as d, pytest.raises(NoRecords, match="out"):
        d.output_topic("out").read_record()


def test_timestamps_and_headers_travel_through_a_repartition_hop() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).to_table(name="t").to_stream().to("out")
    with TopologyTestDriver(b, partitions=2) as d:
        d.input_topic("in").pipe("a", "x", timestamp=42, headers=[("h", b"1")])
        (record,) = d.output_topic("out").read_records()
        assert (record.key, record.value, record.timestamp, record.headers) == (
            "x",
            "x",
            42,
            [("h", b"1")],
        )


def test_the_application_id_names_the_repartition_topics() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, name="g").count(name="c")
    with TopologyTestDriver(b, {"application.id": "payments-app"}) as d:
        assert [st.source_topics for st in d.topology.subtopologies][1] == (
            "payments-app-g-repartition",
        )


def test_a_topology_built_for_another_application_id_is_refused() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, name="g").count(name="c")
    with pytest.raises(TopologyError, match="'one'"):
        TopologyTestDriver(b.build("one"), {"application.id": "two"})


def test_a_processor_error_reaches_the_test() -> None:
    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: 1 // v).to("out")
    with TopologyTestDriver(b) as d, pytest.raises(ZeroDivisionError):
        d.input_topic("in").pipe("k", 0, timestamp=1)
