"""The internal-topic plan: tasks per sub-topology and every internal topic with its
partitions, configs and role, decided without a broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.errors import TopologyError
from worker.processing import Topology
from worker.processing.built_topology import BuiltTopology
from worker.processing.internal_topics import (
    CHANGELOG_CONFIG,
    DLQ_CONFIG,
    REPARTITION_CONFIG,
    InternalTopic,
    Repartition,
    TopicRole,
    plan_internal_topics,
)
from worker.processing.windows import tumbling
from worker.serde import JSON, STR


def two_subtopologies() -> BuiltTopology:
    """Sub-topology 0 counts clicks into a store and a window; 1 reads a table."""
    return (
        Topology()
        .add_source("clicks", "clicks", STR, JSON)
        .add_store("counts", STR, JSON)
        .add_processor("count", lambda ctx, k, v: None, ["clicks"], ["counts"])
        .add_windowed_aggregation(
            "per-minute",
            ["clicks"],
            tumbling(60_000, grace_ms=0),
            initializer=int,
            aggregator=lambda k, v, a: a + 1,
            emit="update",
            key_serde=STR,
            value_serde=JSON,
        )
        .add_table("users", "users", STR, JSON)
        .add_source("logins", "logins", STR, JSON)
        .add_processor("join", lambda ctx, k, v: None, ["logins"], ["users"])
        .build()
    )


def test_each_store_gets_a_changelog_with_its_subtopology_partitions() -> None:
    plan = plan_internal_topics(two_subtopologies(), "app", {"clicks": 4, "users": 2, "logins": 2})

    assert plan.tasks == {0: 4, 1: 2}
    assert plan.topic("app-counts-changelog") == InternalTopic(
        "app-counts-changelog", TopicRole.CHANGELOG, 4, CHANGELOG_CONFIG, True, 0, "counts"
    )
    window = plan.topic("app-per-minute-changelog")
    assert (window.partitions, window.role) == (4, TopicRole.CHANGELOG)
    assert window.config["cleanup.policy"] == "compact,delete"


def test_a_tables_topic_is_planned_as_a_table_and_never_created() -> None:
    plan = plan_internal_topics(two_subtopologies(), "app", {"clicks": 4, "users": 2, "logins": 2})

    users = plan.topic("users")
    assert (users.role, users.partitions, users.created_here) == (TopicRole.TABLE, 2, False)


def test_the_dead_letter_topic_takes_the_largest_task_count_and_need_not_match() -> None:
    plan = plan_internal_topics(
        two_subtopologies(), "app", {"clicks": 4, "users": 2, "logins": 2}, dead_letter=True
    )

    assert plan.topic("app-dlq") == InternalTopic(
        "app-dlq", TopicRole.DEAD_LETTER, 4, DLQ_CONFIG, False
    )


def test_sources_that_are_not_co_partitioned_are_refused_naming_both() -> None:
    with pytest.raises(TopologyError, match="not co-partitioned: logins=3, users=2"):
        plan_internal_topics(two_subtopologies(), "app", {"clicks": 4, "users": 2, "logins": 3})


def test_a_repartition_topic_takes_its_upstream_topics_partitions() -> None:
    built = (
        Topology()
        .add_source("in", "clicks", STR, JSON)
        .add_sink("rekey", "app-by-user-repartition", ["in"], STR, JSON)
        .add_source("by-user", "app-by-user-repartition", STR, JSON)
        .add_store("counts", STR, JSON)
        .add_processor("count", lambda ctx, k, v: None, ["by-user"], ["counts"])
        .build()
    )

    plan = plan_internal_topics(
        built, "app", {"clicks": 6}, repartitions=[Repartition("app-by-user-repartition", "clicks")]
    )

    assert plan.tasks == {0: 6, 1: 6}
    assert plan.topic("app-by-user-repartition") == InternalTopic(
        "app-by-user-repartition", TopicRole.REPARTITION, 6, REPARTITION_CONFIG, True, 0
    )
    assert plan.topic("app-counts-changelog").partitions == 6


def test_repartition_topics_taking_their_partitions_in_a_cycle_are_refused() -> None:
    loop = [Repartition("a", "b"), Repartition("b", "a")]
    with pytest.raises(TopologyError, match="cycle"):
        plan_internal_topics(two_subtopologies(), "app", {}, repartitions=loop)


@given(
    st.dictionaries(st.sampled_from(["clicks", "users", "logins"]), st.integers(1, 8), min_size=3),
    st.booleans(),
)
def test_the_plan_is_a_function_of_its_arguments_and_sorted_by_name(
    counts: dict[str, int], dead_letter: bool
) -> None:
    def plan() -> object:
        return plan_internal_topics(two_subtopologies(), "app", counts, dead_letter=dead_letter)

    if counts["users"] != counts["logins"]:
        with pytest.raises(TopologyError):
            plan()
        return
    first = plan_internal_topics(two_subtopologies(), "app", counts, dead_letter=dead_letter)
    assert plan() == first
    names = [t.name for t in first.topics]
    assert names == sorted(names)
    for topic in first.topics:
        if topic.co_partitioned:
            assert topic.partitions == first.tasks[topic.subtopology or 0]
