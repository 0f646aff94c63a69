"""Internal topics: the dead-letter topic created at start-up with the changelogs, and the
watch that notices topics deleted or re-partitioned under a running worker."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from worker.errors import KafkaUnavailable, TopologyError
from worker.kafka.admin import TopicSpec
from worker.kafka.topics import TopicWatch, prepare_topics
from worker.processing import Topology
from worker.processing.built_topology import BuiltTopology
from worker.processing.internal_topics import DLQ_CONFIG, dlq_topic
from worker.serde import JSON, STR


class FakeAdmin:
    """``Admin``'s two calls prepare_topics makes, over a dict of existing topics."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        self.created: list[TopicSpec] = []
        self.asked: list[set[str]] = []  # the topics of each partition_counts call

    def partition_counts(self, topics: Iterable[str], timeout: float = 10.0) -> dict[str, int]:
        self.asked.append(set(topics))
        return {t: self.topics[t] for t in self.asked[-1] if t in self.topics}

    def create_topics(self, specs: Sequence[TopicSpec], timeout: float = 30.0) -> list[str]:
        for spec in specs:
            self.topics[spec.name] = spec.partitions
            self.created.append(spec)
        return [s.name for s in specs]


def topology() -> BuiltTopology:
    return (
        Topology()
        .add_source("in", "input", key_serde=STR, value_serde=JSON)
        .add_processor("p", lambda ctx, k, v: None, parents=["in"])
        .build()
    )


def test_the_dead_letter_topic_is_created_when_a_handler_dead_letters() -> None:
    admin = FakeAdmin({"input": 3})

    prepare_topics(admin, topology(), "app", create_internal=True, dead_letter=True)  # type: ignore[arg-type]

    assert admin.created == [TopicSpec("app-dlq", 3, DLQ_CONFIG)]
    assert dlq_topic("app") == "app-dlq"


def test_no_dead_letter_topic_without_a_dead_letter_handler() -> None:
    admin = FakeAdmin({"input": 3})

    prepare_topics(admin, topology(), "app", create_internal=True)  # type: ignore[arg-type]

    assert admin.created == []


def test_an_existing_dead_letter_topic_is_used_as_it_is() -> None:
    admin = FakeAdmin({"input": 3, "app-dlq": 1})

    prepare_topics(admin, topology(), "app", create_internal=True, dead_letter=True)  # type: ignore[arg-type]

    assert admin.created == []


def test_a_missing_dead_letter_topic_is_an_error_when_creation_is_off() -> None:
    admin = FakeAdmin({"input": 3})

    with pytest.raises(TopologyError, match="dead-letter topic app-dlq does not exist"):
        prepare_topics(admin, topology(), "app", create_internal=False, dead_letter=True)  # type: ignore[arg-type]


# -- topics deleted or changed under a running worker ---------------------------------


def stateful() -> BuiltTopology:
    return (
        Topology()
        .add_source("in", "input", key_serde=STR, value_serde=JSON)
        .add_store("counts", key_serde=STR, value_serde=JSON)
        .add_processor("p", lambda ctx, k, v: None, parents=["in"], stores=["counts"])
        .add_sink("out", "output", parents=["p"])
        .build()
    )


def watch(admin: FakeAdmin, checked_at: float = float("-inf")) -> TopicWatch:
    layout = prepare_topics(admin, stateful(), "app", create_internal=True)  # type: ignore[arg-type]
    return TopicWatch(
        admin,  # type: ignore[arg-type]
        stateful(),
        "app",
        layout,
        dead_letter=False,
        interval=10.0,
        checked_at=checked_at,
    )


def test_the_topic_watch_is_quiet_while_the_topics_are_as_at_start_up() -> None:
    admin = FakeAdmin({"input": 2, "output": 2})
    topics = watch(admin)
    admin.asked.clear()  # start-up's own look at the topics

    topics.check(0.0)
    topics.check(100.0)

    # Quiet because both checks looked at every topic and found it as it was, not
    # because they skipped looking.
    assert admin.asked == [{"input", "output", "app-counts-changelog"}] * 2


def test_a_changelog_deleted_under_the_worker_is_a_clear_error() -> None:
    admin = FakeAdmin({"input": 2, "output": 2})
    topics = watch(admin)
    topics.check(0.0)
    del admin.topics["app-counts-changelog"]

    topics.check(5.0)  # not yet: one check per interval
    with pytest.raises(TopologyError, match="changelog app-counts-changelog was deleted"):
        topics.check(10.0)


def test_a_source_repartitioned_under_the_worker_is_a_clear_error() -> None:
    admin = FakeAdmin({"input": 2, "output": 2})
    topics = watch(admin)
    admin.topics["input"] = 3

    with pytest.raises(TopologyError, match="topic input now has 3 partitions, 2 at start-up"):
        topics.check(0.0)


def test_an_unreachable_broker_is_not_a_topic_error() -> None:
    admin = FakeAdmin({"input": 2, "output": 2})
    topics = watch(admin)

    def unavailable(topics: Iterable[str], timeout: float = 10.0) -> dict[str, int]:
        raise KafkaUnavailable("no broker")

    answering = admin.partition_counts
    admin.partition_counts = unavailable  # type: ignore[method-assign]
    topics.check(0.0)  # no TopologyError: nothing is known about the topics

    # The watch goes on: once the broker answers again, a real change is reported.
    admin.partition_counts = answering  # type: ignore[method-assign]
    del admin.topics["app-counts-changelog"]
    with pytest.raises(TopologyError, match="changelog app-counts-changelog was deleted"):
        topics.check(10.0)


def test_the_first_watch_check_comes_one_interval_after_the_start_up_check() -> None:
    admin = FakeAdmin({"input": 2, "output": 2})
    topics = watch(admin, checked_at=5.0)
    del admin.topics["output"]

    topics.check(14.0)  # within the interval: no request, so the deletion is not seen yet
    with pytest.raises(TopologyError, match="output was deleted"):
        topics.check(15.0)
