"""Stream operations and grouped aggregations, run through the test driver."""

from __future__ import annotations

from typing import Any

import pytest

from worker.dsl import StreamsBuilder, tumbling
from worker.processing import ProcessorContext
from worker.serde import JSON, STR
from worker.testing import TopologyTestDriver
from worker.windowed_serde import Windowed, WindowedSerde


def run(builder: StreamsBuilder, records: list[tuple[Any, Any]], partitions: int = 1) -> Any:
    driver = TopologyTestDriver(builder, partitions=partitions)
    topic = driver.input_topic("in")
    for i, (key, value) in enumerate(records):
        topic.pipe(key, value, timestamp=1_000 + i)
    return driver


def test_stateless_operations_transform_filter_and_fan_out_records() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(lambda k, v: v % 2 == 0).to("even")
    s.filter_not(lambda k, v: v % 2 == 0).to("odd")
    s.map(lambda k, v: (f"{k}!", v * 10)).to("mapped")
    s.map_values(lambda v: v + 1).to("plus-one")
    s.flat_map(lambda k, v: [(k, v), (k + k, v)]).to("doubled")
    s.flat_map_values(lambda v: range(v)).to("ranges")
    s.select_key(lambda k, v: str(v)).to("by-value")
    with run(b, [("a", 1), ("b", 2)]) as d:
        assert d.output_topic("even").read_key_values() == [("b", 2)]
        assert d.output_topic("odd").read_key_values() == [("a", 1)]
        assert d.output_topic("mapped").read_key_values() == [("a!", 10), ("b!", 20)]
        assert d.output_topic("plus-one").read_key_values() == [("a", 2), ("b", 3)]
        assert d.output_topic("doubled").read_key_values() == [
            ("a", 1),
            ("aa", 1),
            ("b", 2),
            ("bb", 2),
        ]
        assert d.output_topic("ranges").read_key_values() == [("a", 0), ("b", 0), ("b", 1)]
        assert d.output_topic("by-value").read_key_values() == [("1", 1), ("2", 2)]


def test_peek_sees_every_record_and_passes_it_on() -> None:
    seen: list[tuple[str, int]] = []
    b = StreamsBuilder()
    b.stream("in").peek(lambda k, v: seen.append((k, v))).to("out")
    with run(b, [("a", 1), ("b", 2)]) as d:
        assert d.output_topic("out").read_key_values() == [("a", 1), ("b", 2)]
    assert seen == [("a", 1), ("b", 2)]


def test_merge_and_split_route_records_by_named_branches() -> None:
    b = StreamsBuilder()
    merged = b.stream("in").merge(b.stream("other"))
    branches = (
        merged.split(prefix="b-")
        .branch(lambda k, v: v < 0, name="negative")
        .branch(lambda k, v: v == 0, name="zero")
        .default_branch(name="positive")
    )
    assert sorted(branches) == ["b-negative", "b-positive", "b-zero"]
    for name, branch in branches.items():
        branch.to(name)
    with TopologyTestDriver(b) as d:
        d.input_topic("in").pipe("x", -1, timestamp=1)
        d.input_topic("other").pipe("y", 0, timestamp=2)
        d.input_topic("in").pipe("z", 5, timestamp=3)
        assert d.output_topic("b-negative").read_key_values() == [("x", -1)]
        assert d.output_topic("b-zero").read_key_values() == [("y", 0)]
        assert d.output_topic("b-positive").read_key_values() == [("z", 5)]


def test_process_reaches_the_processor_api_with_a_declared_store() -> None:
    def dedupe(ctx: ProcessorContext, key: str, value: int) -> None:
        seen = ctx.store("seen")
        if seen.get(key) is None:
            seen.put(key, value)
            ctx.forward(key, value)

    b = StreamsBuilder().add_state_store("seen", key_serde=STR, value_serde=JSON)
    b.stream("in").process(dedupe, stores=["seen"]).to("out")
    with run(b, [("a", 1), ("a", 2), ("b", 3)]) as d:
        assert d.output_topic("out").read_key_values() == [("a", 1), ("b", 3)]
        assert d.store("seen").all() == {"a": 1, "b": 3}


def test_process_init_schedules_a_punctuator_that_runs_as_stream_time_passes() -> None:
    def start(ctx: ProcessorContext) -> None:
        ctx.schedule(10, "stream", lambda c, now: c.forward("tick", now))

    b = StreamsBuilder()
    b.stream("in").process(lambda ctx, k, v: None, init=start).to("ticks")
    with run(b, [("a", 1), ("a", 2)]) as d:
        d.input_topic("in").pipe("a", 3, timestamp=1_025)
        ticks = [now for _, now in d.output_topic("ticks").read_key_values()]
        assert len(ticks) >= 2 and ticks == sorted(ticks) and ticks[-1] == 1_025


@pytest.mark.parametrize("partitions", [1, 4])
def test_group_by_counts_per_new_key_across_partitions(partitions: int) -> None:
    b = StreamsBuilder()
    counts = b.stream("in").group_by(lambda k, v: v["m"], name="by-m").count(name="counts")
    counts.to_stream().to("out")
    records = [(f"acct-{i}", {"m": f"m{i % 3}"}) for i in range(12)]
    with run(b, records, partitions) as d:
        assert d.store("counts").all() == {"m0": 4, "m1": 4, "m2": 4}
        last = d.output_topic("out").read_key_values_to_map()
        assert last == {"m0": 4, "m1": 4, "m2": 4}


def test_reduce_and_aggregate_fold_values_per_key() -> None:
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    grouped.reduce(lambda agg, v: agg + v, name="sums")
    grouped.aggregate(lambda: [], lambda k, v, agg: [*agg, v], name="lists")
    with run(b, [("a", 1), ("b", 2), ("a", 3)]) as d:
        assert d.store("sums").all() == {"a": 4, "b": 2}
        assert d.store("lists").all() == {"a": [1, 3], "b": [2]}


def test_records_with_a_none_key_or_value_are_not_aggregated() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v and v.get("m"), name="g").count(name="c")
    with run(b, [("a", {"m": None}), ("b", None), ("c", {"m": "x"})]) as d:
        assert d.store("c").all() == {"x": 1}


def test_to_table_keeps_the_latest_value_and_a_none_deletes_it() -> None:
    b = StreamsBuilder()
    b.stream("in").to_table(name="latest").to_stream().to("out")
    with run(b, [("a", 1), ("b", 2), ("a", 3), ("b", None)]) as d:
        assert d.store("latest").all() == {"a": 3}
        assert d.output_topic("out").read_key_values() == [
            ("a", 1),
            ("b", 2),
            ("a", 3),
            ("b", None),
        ]


@pytest.mark.parametrize("emit", ["update", "final"])
def test_a_windowed_count_emits_on_update_or_once_when_the_window_closes(emit: str) -> None:
    b = StreamsBuilder()
    windowed = (
        b.stream("in")
        .group_by(lambda k, v: v, name="g")
        .windowed_by(tumbling(10_000, grace_ms=0))
        .count(name="per-window", emit=emit)
    )
    windowed.to_stream().to("out", key_serde=WindowedSerde(STR))
    with TopologyTestDriver(b) as d:
        topic = d.input_topic("in")
        for ts in (1_000, 2_000, 3_000):
            topic.pipe("k", "m", timestamp=ts)
        topic.pipe("k", "other", timestamp=25_000)  # closes the first window
        records = d.output_topic("out").read_key_values()
        first = Windowed("m", 0, 10_000)
        if emit == "update":
            assert records[:3] == [(first, 1), (first, 2), (first, 3)]
        else:
            assert records == [(first, 3)]
        # the first window has expired (retention: size + grace); the second is there
        assert d.store("per-window").fetch("other", 0, 30_000) == [(20_000, 1)]
