"""A rolling upgrade from version-1-only workers: every round stays readable and sticky.

Workers from before issue 23 read and write only user data version 1 (JSON, host maps in
every assignment). They are played here by members that subscribe in version 1 with
``latest_supported`` 1 and check that whatever they are sent is version 1 JSON.
"""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from worker.assignment.model import Assignment, Subscription, user_data_version
from worker.assignment.planner import PlannerConfig
from worker.assignment.task_id import TaskId
from worker.kafka.task_assignor import TaskAssignor

SOURCES = {0: ["a"]}
TOPICS = ["a"]
TASKS = frozenset(TaskId(0, p) for p in range(6))


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(len(TASKS)))


class Member:
    def __init__(self, name: str, old: bool) -> None:
        self.name = name
        self.old = old
        self.assignor = TaskAssignor(SOURCES, PlannerConfig())
        self.assignment = Assignment.empty()

    def upgrade(self) -> None:
        """A restart on the new version: a fresh assignor, the same local state."""
        self.old = False
        self.assignor = TaskAssignor(SOURCES, PlannerConfig())

    def join(self) -> SimpleNamespace:
        held = self.assignment.active
        sub = Subscription(self.name, f"{self.name}:80", dict.fromkeys(held, 0), held, frozenset())
        if self.old:
            data = orjson.dumps({**orjson.loads(sub.encode(1)), "latest_supported": 1})
        else:
            self.assignor.set_subscription(sub)
            data = bytes(self.assignor.metadata(TOPICS).user_data)
        metadata = ConsumerProtocolSubscription(0, TOPICS, data)
        return SimpleNamespace(member_id=self.name, group_instance_id=None, metadata=metadata)

    def receive(self, protocol: ConsumerProtocolAssignment, generation: int) -> None:
        data = bytes(protocol.user_data)
        if self.old:
            assert orjson.loads(data)["version"] == 1, "an old worker reads only JSON version 1"
        self.assignor.on_assignment(protocol, generation)
        received = self.assignor.take()
        assert received is not None
        self.assignment = received


def run_round(members: list[Member], generation: int) -> dict[str, bytes]:
    """One rebalance led by the first member; returns what each member subscribed with."""
    joined = [m.join() for m in members]
    sent = {j.member_id: bytes(j.metadata.user_data) for j in joined}
    result = members[0].assignor.assign(Cluster(), joined)
    for member in members:
        member.receive(result[member.name], generation)
    actives = [m.assignment.active for m in members]
    assert sum(map(len, actives)) == len(frozenset().union(*actives)), "a task on two members"
    return sent


def test_a_rolling_upgrade_keeps_every_round_readable_and_every_task_in_place() -> None:
    members = [Member("n", old=False), Member("o1", old=True), Member("o2", old=True)]
    run_round(members, 1)
    placed = {m.name: m.assignment.active for m in members}
    assert frozenset().union(*placed.values()) == TASKS

    members[1].upgrade()
    sent = run_round(members, 2)
    # One old worker left: everyone subscribes and is answered in version 1, which an
    # old worker could read, also as the group's next leader.
    assert all(orjson.loads(data)["version"] == 1 for data in sent.values())
    assert all(set(m.assignment.active_hosts) == {"n:80", "o1:80", "o2:80"} for m in members)

    members[2].upgrade()
    run_round(members, 3)  # the first round without an old worker: answered in version 2
    sent = run_round(members, 4)
    assert all(user_data_version(data) == 2 for data in sent.values())
    directory = [m for m in members if m.assignment.active_hosts]
    assert [m.name for m in directory] == ["n"]
    assert all(m.assignment.directory == "n:80" for m in members)
    assert {m.name: m.assignment.active for m in members} == placed


def test_a_returning_old_worker_brings_the_group_back_to_version_1() -> None:
    members = [Member("n", old=False), Member("m", old=False)]
    run_round(members, 1)
    run_round(members, 2)
    members.append(Member("old", old=True))
    run_round(members, 3)
    assert all(set(m.assignment.active_hosts) == {"n:80", "m:80", "old:80"} for m in members)
    sent = run_round(members, 4)
    assert all(orjson.loads(data)["version"] == 1 for data in sent.values())
