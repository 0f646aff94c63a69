"""How the DSL compiles: where repartition topics go, how things are named, sub-topologies."""

from __future__ import annotations

import pytest

from worker.dsl import StreamsBuilder
from worker.dsl.describe import describe
from worker.errors import TopologyError

APP = "app"


def repartitions(builder: StreamsBuilder) -> list[str]:
    return [r.topic for r in builder.build(APP).repartition_topics]


def test_a_key_change_alone_adds_no_repartition_topic() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v["m"]).map(lambda k, v: (v, k)).to("out")
    assert repartitions(b) == []


def test_a_re_keyed_stream_reaching_an_aggregation_is_repartitioned_once() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).filter(lambda k, v: True).group_by_key().count(
        name="counts"
    )
    assert repartitions(b) == ["app-counts-repartition"]


@pytest.mark.parametrize(
    "op",
    [
        lambda s: s.filter(lambda k, v: True),
        lambda s: s.filter_not(lambda k, v: False),
        lambda s: s.map_values(lambda v: v),
        lambda s: s.flat_map_values(lambda v: [v]),
        lambda s: s.peek(lambda k, v: None),
    ],
)
def test_key_preserving_operations_before_an_aggregation_add_no_repartition(op: object) -> None:
    b = StreamsBuilder()
    op(b.stream("in")).group_by_key().count(name="counts")  # type: ignore[operator]
    assert repartitions(b) == []


def test_group_by_always_repartitions_under_its_name() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, name="by-value").count(name="counts")
    assert repartitions(b) == ["app-by-value-repartition"]


def test_merging_a_re_keyed_stream_marks_the_merge_for_repartition() -> None:
    b = StreamsBuilder()
    plain = b.stream("a")
    rekeyed = b.stream("b").select_key(lambda k, v: v)
    plain.merge(rekeyed).group_by_key().count(name="c")
    assert repartitions(b) == ["app-c-repartition"]


def test_a_re_keyed_stream_turned_into_a_table_is_repartitioned() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).to_table(name="latest")
    assert repartitions(b) == ["app-latest-repartition"]


def test_a_table_group_by_always_repartitions() -> None:
    b = StreamsBuilder()
    b.table("rows", name="rows").group_by(lambda k, v: (v, 1), name="regroup").count(name="n")
    assert repartitions(b) == ["app-regroup-repartition"]


def test_each_side_of_a_repartition_topic_is_its_own_sub_topology() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, name="g").count(name="c").to_stream().to("out")
    built = b.build(APP).build()
    assert [st.source_topics for st in built.subtopologies] == [
        ("in",),
        ("app-g-repartition",),
    ]
    assert [s.name for s in built.subtopologies[1].stores] == ["c"]


def test_a_named_store_and_topic_keep_their_names_when_an_operator_is_inserted_upstream() -> None:
    def build(extra: bool) -> list[str]:
        b = StreamsBuilder()
        s = b.stream("in")
        if extra:
            s = s.peek(lambda k, v: None)
        s.group_by(lambda k, v: v, name="g").count(name="c")
        built = b.build(APP)
        return [r.topic for r in built.repartition_topics] + sorted(built._stores)

    assert build(False) == build(True)


def test_generated_names_are_the_same_on_every_build() -> None:
    def text() -> str:
        b = StreamsBuilder()
        b.stream("in").select_key(lambda k, v: v).group_by_key().count().to_stream().to("out")
        return b.describe(APP)

    assert text() == text()
    assert "app-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition" in text()


def test_a_repartition_needs_the_application_id() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v).count()
    with pytest.raises(TopologyError, match="application id"):
        b.build()


def test_describe_lists_sub_topologies_sources_processors_stores_and_sinks() -> None:
    b = StreamsBuilder()
    s = b.stream("payments", name="payments")
    s.group_by(lambda k, v: v["merchant"], name="by-merchant").count(name="per-merchant")
    text = describe(b.build(APP))
    assert text.startswith("Topologies:\n   Sub-topology: 0\n")
    assert "    Source: payments (topics: [payments])\n" in text
    assert "    Sink: by-merchant-repartition-sink (topic: app-by-merchant-repartition)" in text
    assert "   Sub-topology: 1\n" in text
    assert (
        "    Source: by-merchant-repartition-source (topics: [app-by-merchant-repartition])"
        " (repartition)\n" in text
    )
    assert "(stores: [per-merchant])" in text


def test_a_name_used_twice_is_refused() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(lambda k, v: True, name="f")
    with pytest.raises(TopologyError, match="'f'"):
        s.filter(lambda k, v: True, name="f")


def test_split_needs_a_branch_and_distinct_names() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    with pytest.raises(TopologyError):
        s.split().no_default_branch()
    with pytest.raises(TopologyError):
        s.split().branch(lambda k, v: True, name="a").branch(lambda k, v: True, name="a")


def test_aggregations_of_one_grouped_stream_share_its_repartition_topic() -> None:
    b = StreamsBuilder()
    grouped = b.stream("in").group_by(lambda k, v: v, name="g")
    grouped.count(name="c")
    grouped.reduce(lambda a, v: v, name="r")
    assert repartitions(b) == ["app-g-repartition"]
    built = b.build(APP).build()
    assert sorted(s.name for s in built.subtopologies[1].stores) == ["c", "r"]
