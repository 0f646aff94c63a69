"""Repartition topics at start-up: planned and created with the other internal topics,
with their writer's partition count, refused when an existing one has another; internal
topics the topology no longer names reported."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from tests.unit.kafka.test_internal_topics import FakeAdmin
from worker.dsl import StreamsBuilder
from worker.errors import TopologyError
from worker.events import TOPICS_INTERNAL_UNUSED
from worker.kafka.admin import TopicSpec
from worker.kafka.repartition_topics import report_unused_internal_topics
from worker.kafka.topics import prepare_topics
from worker.processing.built_topology import BuiltTopology
from worker.processing.internal_topics import REPARTITION_CONFIG


class ListingAdmin(FakeAdmin):
    def topic_names(self, timeout: float = 10.0) -> set[str]:
        return set(self.topics)


def grouped(name: str = "g") -> BuiltTopology:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, name=name).count(name="c").to_stream().to("out")
    return b.build("app").build()


def test_a_missing_repartition_topic_is_created_with_the_inputs_partition_count() -> None:
    admin: Any = ListingAdmin({"in": 4, "out": 4})
    layout = prepare_topics(admin, grouped(), "app", True)
    assert TopicSpec("app-g-repartition", 4, dict(REPARTITION_CONFIG)) in admin.created
    assert layout.partitions == {0: 4, 1: 4}


def test_an_existing_repartition_topic_with_another_partition_count_is_refused() -> None:
    admin: Any = ListingAdmin({"in": 4, "out": 4, "app-g-repartition": 2})
    with pytest.raises(TopologyError, match="app-g-repartition has 2 partitions"):
        prepare_topics(admin, grouped(), "app", True)


def test_a_missing_repartition_topic_is_an_error_when_internal_topics_are_not_created() -> None:
    admin: Any = ListingAdmin({"in": 4, "out": 4, "app-c-changelog": 4})
    with pytest.raises(TopologyError, match="internal.topics.create is false"):
        prepare_topics(admin, grouped(), "app", False)


def test_internal_topics_a_renamed_grouping_left_behind_are_reported() -> None:
    admin: Any = ListingAdmin(
        {"in": 1, "app-old-repartition": 1, "app-c-changelog": 1, "other-x-repartition": 1}
    )
    with structlog.testing.capture_logs() as logs:
        unused = report_unused_internal_topics(admin, grouped("new"), "app")
    assert unused == ["app-old-repartition"]
    (event,) = [e for e in logs if e["event"] == TOPICS_INTERNAL_UNUSED]
    assert event["unused"] == ["app-old-repartition"]
    assert "app-new-repartition" in event["planned"]


def test_nothing_is_reported_when_the_topology_names_every_internal_topic() -> None:
    admin: Any = ListingAdmin({"in": 1, "app-g-repartition": 1, "app-c-changelog": 1})
    assert report_unused_internal_topics(admin, grouped(), "app") == []
