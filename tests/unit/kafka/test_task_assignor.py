"""The assignor adapter with fake cluster metadata and members: no broker needed."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from worker.assignment.model import (
    LATEST_OFFSET,
    Assignment,
    MalformedUserData,
    Subscription,
    UnsupportedVersion,
)
from worker.assignment.planner import PlannerConfig
from worker.assignment.task_id import TaskId
from worker.kafka.task_assignor import TaskAssignor

T = TaskId
SOURCES = {0: ["a"], 1: ["b", "c"]}


class FakeCluster:
    def __init__(self, partitions: dict[str, int]) -> None:
        self._partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self._partitions.get(topic)
        return None if count is None else set(range(count))


def _member(member_id: str, user_data: bytes) -> SimpleNamespace:
    metadata = ConsumerProtocolSubscription(0, ["a", "b", "c"], user_data)
    return SimpleNamespace(member_id=member_id, group_instance_id=None, metadata=metadata)


def _sub(process: str, port: int, prev: set[TaskId] | None = None) -> bytes:
    prev_active = frozenset(prev or ())
    sums = dict.fromkeys(prev_active, LATEST_OFFSET)
    return Subscription(process, f"h:{port}", sums, prev_active, frozenset()).encode()


def _assign(
    members: list[SimpleNamespace], partitions: dict[str, int] | None = None
) -> dict[str, tuple[set[tuple[str, int]], Assignment]]:
    cluster = FakeCluster(partitions or {"a": 4, "b": 4, "c": 4})
    result = TaskAssignor(SOURCES, PlannerConfig()).assign(cluster, members)
    decoded = {}
    for member_id, protocol in result.items():
        assert isinstance(protocol, ConsumerProtocolAssignment)
        wire = ConsumerProtocolAssignment.decode(protocol.encode())
        owned = {(tp.topic, tp.partition) for tp in wire.partitions()}
        decoded[member_id] = (owned, Assignment.decode(bytes(wire.user_data)))
    return decoded


def _all_tasks() -> set[TaskId]:
    return {T(s, p) for s in (0, 1) for p in range(4)}


def _sources(tasks: frozenset[TaskId]) -> set[tuple[str, int]]:
    return {(topic, t.partition) for t in tasks for topic in SOURCES[t.subtopology]}


def test_each_member_owns_exactly_its_active_tasks_source_partitions() -> None:
    result = _assign([_member("m1", _sub("p1", 1)), _member("m2", _sub("p2", 2))])
    all_tasks: set[TaskId] = set()
    for owned, assignment in result.values():
        assert len(assignment.active) == 4
        assert owned == _sources(assignment.active)
        all_tasks |= assignment.active
    assert all_tasks == _all_tasks()


def test_every_member_gets_the_whole_host_map() -> None:
    result = _assign([_member("m1", _sub("p1", 1)), _member("m2", _sub("p2", 2))])
    maps = {member: assignment.active_hosts for member, (_, assignment) in result.items()}
    assert maps["m1"] == maps["m2"]
    assert maps["m1"]["h:1"] == result["m1"][1].active
    assert maps["m1"]["h:2"] == result["m2"][1].active
    assert result["m1"][1].next_probe_ms == -1


def test_previous_actives_in_the_subscriptions_are_kept() -> None:
    first = {T(0, 0), T(0, 1), T(1, 0), T(1, 1)}
    second = {T(0, 2), T(0, 3), T(1, 2), T(1, 3)}
    result = _assign([_member("m1", _sub("p1", 1, second)), _member("m2", _sub("p2", 2, first))])
    assert result["m1"][1].active == second
    assert result["m2"][1].active == first


@pytest.mark.parametrize(
    "garbage",
    [b"", b"not json", orjson.dumps({"version": 99, "process_id": "future"})],
)
def test_an_undecodable_subscription_counts_as_a_member_without_state(garbage: bytes) -> None:
    result = _assign([_member("m1", _sub("p1", 1)), _member("m2", garbage)])
    assert len(result["m2"][1].active) == 4
    assert set(result["m1"][1].active_hosts) == {"h:1"}


def test_topics_with_different_partition_counts_use_the_widest() -> None:
    result = _assign([_member("m1", _sub("p1", 1))], {"a": 2, "b": 4, "c": 3})
    owned, assignment = result["m1"]
    assert {t for t in assignment.active if t.subtopology == 1} == {T(1, p) for p in range(4)}
    assert ("b", 3) in owned
    assert ("c", 3) not in owned


def test_a_missing_source_topic_has_no_tasks() -> None:
    result = _assign([_member("m1", _sub("p1", 1))], {"b": 2, "c": 2})
    assert result["m1"][1].active == {T(1, 0), T(1, 1)}


def test_two_members_with_one_process_id_are_planned_as_two_clients() -> None:
    result = _assign([_member("m1", _sub("p1", 1)), _member("m2", _sub("p1", 1))])
    assert len(result["m1"][1].active) == len(result["m2"][1].active) == 4
    assert result["m1"][1].active_hosts["h:1"] == frozenset(_all_tasks())


def test_metadata_carries_the_prepared_subscription() -> None:
    assignor = TaskAssignor(SOURCES, PlannerConfig())
    subscription = Subscription("p1", "h:1", {T(0, 0): 5}, frozenset(), frozenset())
    assignor.set_subscription(subscription)
    metadata = assignor.metadata({"c", "a", "b"})
    assert metadata.topics == ["a", "b", "c"]
    assert Subscription.decode(bytes(metadata.user_data)) == subscription


def test_a_received_assignment_is_taken_once_with_its_generation() -> None:
    assignor = TaskAssignor(SOURCES, PlannerConfig())
    sent = Assignment(
        frozenset({T(0, 1)}), frozenset(), frozenset(), {"h:1": frozenset({T(0, 1)})}, {}
    )
    assignor.on_assignment(ConsumerProtocolAssignment(0, [("a", [1])], sent.encode()), 4)
    assert assignor.take() == sent.with_generation(4)
    assert assignor.take() is None


@pytest.mark.parametrize(
    ("user_data", "error"),
    [
        (orjson.dumps({"version": 2}), UnsupportedVersion),
        (b"\xff", MalformedUserData),
    ],
)
def test_an_unreadable_assignment_is_raised_to_the_member(
    user_data: bytes, error: type[Exception]
) -> None:
    assignor = TaskAssignor(SOURCES, PlannerConfig())
    assignor.on_assignment(ConsumerProtocolAssignment(0, [], user_data), 1)
    with pytest.raises(error):
        assignor.take()
    assert assignor.take() is None
