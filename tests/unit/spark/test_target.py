"""The target topic must exist (or be created) with the partition count the job expects."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from worker.kafka.admin import TopicSpec
from worker.spark.errors import LoadRejected
from worker.spark.target import Target, check_target, create, expected_partitions


class FakeAdmin:
    """``Admin.partition_counts`` / ``create_topics`` over a dict of topic -> partitions."""

    def __init__(self, **topics: int) -> None:
        self.topics = {name.replace("_", "-"): n for name, n in topics.items()}
        self.created: list[TopicSpec] = []

    def partition_counts(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, int]:
        return {t: self.topics[t] for t in topics if t in self.topics}

    def create_topics(self, specs: Sequence[TopicSpec], timeout: float = 30.0) -> list[str]:
        self.created.extend(specs)
        self.topics.update({s.name: s.partitions for s in specs})
        return [s.name for s in specs]


def test_a_topic_with_the_co_partitioned_count_is_accepted():
    admin = FakeAdmin(account_profiles=4, payments=4)

    target = check_target(admin, "account-profiles", co_partition_with=["payments"])

    assert target == Target("account-profiles", 4, "co-partitioned with payments (4)")
    assert admin.created == []


def test_without_an_expectation_the_topics_own_count_is_used():
    assert check_target(FakeAdmin(t=6), "t").partitions == 6


def test_a_topic_with_another_count_than_its_co_partitioned_topic_is_rejected():
    admin = FakeAdmin(account_profiles=8, payments=4)

    with pytest.raises(LoadRejected, match="has 8 partitions but the job expects 4 \\(co-part"):
        check_target(admin, "account-profiles", co_partition_with=["payments"])


def test_a_topic_with_another_count_than_given_is_rejected():
    with pytest.raises(LoadRejected, match="has 3 partitions but the job expects 5 \\(--part"):
        check_target(FakeAdmin(t=3), "t", partitions=5)


def test_a_missing_topic_is_rejected_unless_asked_to_create_it():
    admin = FakeAdmin()

    with pytest.raises(LoadRejected, match="'t' does not exist; create it .* or pass --create"):
        check_target(admin, "t", partitions=3)
    assert admin.created == []


def test_a_missing_topic_may_be_created_but_checking_creates_nothing():
    admin = FakeAdmin(payments=4)

    target = check_target(admin, "p", co_partition_with=["payments"], create=True)

    assert target == Target("p", 4, "co-partitioned with payments (4)", exists=False)
    assert admin.created == []


def test_creating_makes_a_compacted_topic_with_the_checked_count():
    admin = FakeAdmin(payments=4)
    target = check_target(admin, "p", co_partition_with=["payments"], create=True)

    created = create(admin, target)

    assert created.exists
    assert admin.created == [TopicSpec("p", 4, {"cleanup.policy": "compact"})]
    assert create(admin, created) == created and len(admin.created) == 1


def test_a_topic_created_meanwhile_with_another_count_is_rejected():
    admin = FakeAdmin()
    target = check_target(admin, "p", partitions=4, create=True)
    admin.topics["p"] = 2  # someone else was faster; create_topics then finds it existing
    admin.create_topics = lambda specs, timeout=30.0: []  # type: ignore[method-assign]

    with pytest.raises(LoadRejected, match="created meanwhile with 2 partitions, not 4"):
        create(admin, target)


def test_a_missing_topic_without_an_expected_count_cannot_be_created():
    with pytest.raises(LoadRejected, match="give --partitions or --co-partition-with"):
        check_target(FakeAdmin(), "t", create=True)


def test_co_partitioning_with_a_missing_topic_is_rejected():
    with pytest.raises(LoadRejected, match="'payments' does not exist"):
        check_target(FakeAdmin(t=4), "t", co_partition_with=["payments"])


def test_co_partitioned_topics_that_disagree_are_rejected():
    with pytest.raises(LoadRejected, match="disagree: a=4, b=2"):
        expected_partitions({"a": 4, "b": 2}, None, ["a", "b"])


def test_a_partition_count_contradicting_the_co_partitioned_topics_is_rejected():
    with pytest.raises(LoadRejected, match="--partitions 8 contradicts co-partitioned with a"):
        expected_partitions({"a": 4}, 8, ["a"])


def test_nothing_to_expect_gives_no_count():
    assert expected_partitions({}, None, []) == (None, "")
    assert expected_partitions({}, 3, []) == (3, "--partitions 3")
