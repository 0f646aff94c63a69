"""Finding repartition topics in a built topology, and sizing them in the internal-topic
plan (pure)."""

from __future__ import annotations

import pytest

from worker.dsl import StreamsBuilder
from worker.errors import TopologyError
from worker.kafka.topics import repartitions_of
from worker.processing.internal_topics import TopicRole, plan_internal_topics
from worker.processing.repartitions import repartition_writers

APP = "app"


def chained() -> StreamsBuilder:
    """in (re-keyed) -> app-a-repartition -> count -> re-keyed again -> app-b-repartition."""
    b = StreamsBuilder()
    counts = b.stream("in").group_by(lambda k, v: v, name="a").count(name="ca")
    counts.to_stream().group_by(lambda k, v: str(v), name="b").count(name="cb")
    return b


def test_repartition_topics_are_found_with_the_sub_topology_writing_them() -> None:
    built = chained().build(APP).build()
    assert repartition_writers(built, APP) == {"app-a-repartition": 0, "app-b-repartition": 1}


def test_a_repartition_topic_has_its_writers_input_partitions_through_a_chain() -> None:
    built = chained().build(APP).build()
    plan = plan_internal_topics(built, APP, {"in": 6}, repartitions=repartitions_of(built, APP))
    sized = {t.name: t.partitions for t in plan.topics if t.role is TopicRole.REPARTITION}
    assert sized == {"app-a-repartition": 6, "app-b-repartition": 6}
    assert plan.tasks == {0: 6, 1: 6, 2: 6}
    assert plan.topic("app-a-repartition").config == {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
    }


def test_a_repartition_topic_whose_writer_reads_an_unknown_topic_cannot_be_sized() -> None:
    built = chained().build(APP).build()
    with pytest.raises((TopologyError, KeyError)):
        plan_internal_topics(built, APP, {}, repartitions=repartitions_of(built, APP))


def test_a_user_topic_named_like_a_repartition_topic_of_another_app_is_not_one() -> None:
    b = StreamsBuilder()
    b.stream("in").to("other-x-repartition")
    assert repartition_writers(b.build(APP).build(), APP) == {}
