"""GroupMember against the real broker: task split, host maps, commits, leaving, fencing,
standbys, warmups, cooperative moves and requested rebalances.

Two or three members live in this one test process, all driven by ``poll`` from ONE
thread (see ``drive``): a member never blocks for a join, so one loop serves them all, as
a worker's processing loop serves its member between batches. Joins on the test broker
take ~3 s per round.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.waiting import wait_until
from worker.assignment.model import Assignment, Subscription
from worker.assignment.task_id import TP, TaskId
from worker.config import Settings
from worker.errors import TaskMigrated
from worker.kafka.admin import Admin
from worker.kafka.member_states import Assigned, Lost, MembershipEvent, MemberState
from worker.kafka.membership import GroupMember
from worker.observability import Metrics

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]

PARTITIONS = 4
JOIN_TIMEOUT = 45.0
ALL_TASKS = frozenset(TaskId(s, p) for s in (0, 1) for p in range(PARTITIONS))
EndOffsets = Callable[[Sequence[TP]], dict[TP, int]]


class Recorder:
    """Plays the runtime for one member: records what ``poll`` returns and owns at once
    the actives it is given (what the next subscription reports)."""

    def __init__(self) -> None:
        self.events: list[MembershipEvent] = []
        self.owned: frozenset[TaskId] = frozenset()
        self.on_revoke: Callable[[], None] | None = None

    def handle(self, events: Sequence[MembershipEvent]) -> None:
        for event in events:
            self.events.append(event)
            if isinstance(event, Lost):
                self.owned = frozenset()
                continue
            if event.revoked and self.on_revoke is not None:
                self.on_revoke()
            self.owned = event.assignment.active

    @property
    def assignments(self) -> list[Assignment]:
        return [e.assignment for e in self.events if isinstance(e, Assigned)]

    @property
    def revoked(self) -> frozenset[TaskId]:
        """Every active this member was ever told to hand over."""
        return frozenset().union(*(e.revoked for e in self.events if isinstance(e, Assigned)))

    @property
    def latest(self) -> Assignment | None:
        found = self.assignments
        return found[-1] if found else None


@pytest.fixture(scope="module")
def source_topics(bootstrap: str) -> dict[int, list[str]]:
    """Subtopology 0 reads one topic, subtopology 1 two co-partitioned ones."""
    suffix = uuid.uuid4().hex[:8]
    topics = {0: [f"orders-{suffix}"], 1: [f"payments-{suffix}", f"refunds-{suffix}"]}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for group in topics.values() for t in group]
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
        future.result(30)
    return topics


@pytest.fixture(scope="module")
def changelog_topics(bootstrap: str) -> dict[int, list[str]]:
    """One store changelog per subtopology (empty: every member is caught up on them)."""
    suffix = uuid.uuid4().hex[:8]
    topics = {0: [f"orders-store-{suffix}"], 1: [f"payments-store-{suffix}"]}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for group in topics.values() for t in group]
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
        future.result(30)
    return topics


class Group:
    """Members of one fresh group (one application id) and their recorders."""

    def __init__(self, bootstrap: str, source_topics: dict[int, list[str]]) -> None:
        self.bootstrap = bootstrap
        self.source_topics = source_topics
        self.application_id = f"membership-{uuid.uuid4().hex[:10]}"
        self.members: list[GroupMember] = []
        self.metrics: dict[str, Metrics] = {}

    def settings(self, name: str, **overrides: Any) -> Settings:
        return Settings.model_validate(
            {
                "application.id": self.application_id,
                "bootstrap.servers": self.bootstrap,
                "application.server": f"{name}:8080",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "max.poll.interval.ms": 10000,
                **overrides,
            }
        )

    def join(
        self,
        name: str,
        prev_active: frozenset[TaskId] = frozenset(),
        sums: Mapping[TaskId, int] | None = None,
        changelog_topics: Mapping[int, Sequence[str]] | None = None,
        end_offsets: EndOffsets | None = None,
        overrides: Mapping[str, Any] | None = None,
        stale_member_id: str | None = None,
    ) -> Pair:
        """A started member named ``name`` (its process id) that reports ``sums`` (default
        0 for each previous active) and ``prev_active`` at every join."""
        config = self.settings(name, **(overrides or {}))
        recorder = Recorder()
        recorder.owned = prev_active
        reported = dict(sums) if sums is not None else dict.fromkeys(prev_active, 0)

        def subscription() -> Subscription:
            owned = recorder.owned
            offsets = {**dict.fromkeys(owned, 0), **reported}
            return Subscription(name, config.endpoint(), offsets, owned, frozenset())

        metrics = self.metrics[name] = Metrics()
        member = GroupMember(
            config,
            self.source_topics,
            subscription,
            metrics,
            changelog_topics=changelog_topics,
            end_offsets=end_offsets,
        )
        member.start(stale_member_id=stale_member_id)
        self.members.append(member)
        return member, recorder

    def sources(self, tasks: frozenset[TaskId]) -> frozenset[tuple[str, int]]:
        return frozenset(
            (topic, t.partition) for t in tasks for topic in self.source_topics[t.subtopology]
        )


@pytest.fixture
def group(bootstrap: str, source_topics: dict[int, list[str]]) -> Iterator[Group]:
    created = Group(bootstrap, source_topics)
    yield created
    for member in created.members:
        member.close()


Pair = tuple[GroupMember, Recorder]


def drive(pairs: Sequence[Pair], done: Callable[[], object], message: str) -> float:
    """Poll every member from this one thread until ``done()`` holds; returns the longest
    single ``poll`` call seen, which stays short because a member never waits for a join."""
    longest = 0.0

    def step() -> object:
        nonlocal longest
        for member, recorder in pairs:
            started = time.monotonic()
            events = member.poll()
            longest = max(longest, time.monotonic() - started)
            recorder.handle(events)
        return done()

    wait_until(step, JOIN_TIMEOUT, interval=0.02, message=message)
    return longest


def settled(pairs: Sequence[Pair]) -> bool:
    """Every member is stable and holds the assignment of the generation it is in, all
    the same one."""
    generations = set()
    for member, recorder in pairs:
        latest = recorder.latest
        if member.state is not MemberState.STABLE:
            return False
        if latest is None or latest.generation != member.generation:
            return False
        generations.add(latest.generation)
    return len(generations) == 1


def test_two_members_split_the_tasks_evenly_and_see_each_others_hosts(group: Group) -> None:
    a = group.join("a")
    b = group.join("b")
    drive([a, b], lambda: settled([a, b]), "two members to settle")

    first, second = a[1].latest, b[1].latest
    assert first is not None and second is not None
    assert len(first.active) == len(second.active) == 4
    assert first.active | second.active == ALL_TASKS
    assert a[0].assigned_partitions == group.sources(first.active)
    assert b[0].assigned_partitions == group.sources(second.active)
    hosts = {"a:8080": first.active, "b:8080": second.active}
    # User data version 2: the directory ("a", the lowest key) alone carries the maps.
    assert first.directory == second.directory == "a:8080"
    assert first.active_hosts == hosts
    assert second.active_hosts == {}
    assert first.standby == first.warmup == frozenset()
    assert first.next_probe_ms == -1
    assert a[0].member_id and a[0].member_id != b[0].member_id


# Tansu only: its premise is that both members are in the first round. Kafka completes a
# first member's join at once (group.initial.rebalance.delay.ms=0 in tests), so a takes
# every task before b joins, and then ownership, not a reported previous active, decides
# (both are the planner's rules: tests/unit/assignment).
@pytest.mark.brokers("tansu")
def test_previous_actives_reported_in_the_subscription_are_kept(group: Group) -> None:
    mine = frozenset(t for t in ALL_TASKS if t.partition >= 2)
    a = group.join("a", prev_active=mine)
    b = group.join("b", prev_active=ALL_TASKS - mine)
    drive([a, b], lambda: settled([a, b]), "two members to settle")

    assert a[1].latest is not None and a[1].latest.active == mine
    assert b[1].latest is not None and b[1].latest.active == ALL_TASKS - mine


def test_a_commit_is_read_back_by_committed(group: Group) -> None:
    member, recorder = group.join("a")
    drive([(member, recorder)], lambda: settled([(member, recorder)]), "the member to join")
    topic = group.source_topics[0][0]

    member.commit({(topic, 0): 42, (topic, 1): 7})

    assert member.committed([(topic, 0), (topic, 1), (topic, 2)]) == {
        (topic, 0): 42,
        (topic, 1): 7,
        (topic, 2): None,
    }


@pytest.mark.brokers("tansu", "kafka")
def test_a_commit_keeps_or_drops_the_metadata_of_its_offsets(
    group: Group, broker_kind: str
) -> None:
    """A task's stream time travels as offset metadata where the broker keeps it: Kafka
    does. The test broker drops it (docs/platform-notes.md), which is why stores keep a
    copy: this test notices the day it starts keeping it."""
    member, recorder = group.join("a")
    drive([(member, recorder)], lambda: settled([(member, recorder)]), "the member to join")
    topic = group.source_topics[0][0]

    member.commit({(topic, 0): 42, (topic, 1): 7}, {(topic, 0): "AQAAAYvMDqSA"})

    found = member.committed_with_metadata([(topic, 0), (topic, 1), (topic, 2)])
    kept = "AQAAAYvMDqSA" if broker_kind == "kafka" else ""
    assert found[(topic, 0)] == (42, kept), "the broker changed: update the notes"
    assert found[(topic, 1)] == (7, "")
    assert found[(topic, 2)] == (None, "")


def test_when_a_member_leaves_the_other_keeps_its_tasks_and_gets_every_task(
    group: Group,
) -> None:
    a = group.join("a")
    b = group.join("b")
    drive([a, b], lambda: settled([a, b]), "two members to settle")
    topic = group.source_topics[0][0]
    before = a[1].latest
    assert before is not None
    revoked_before = a[1].revoked  # on Kafka a may have joined alone first, then given half

    b[0].close()
    drive([a], lambda: a[1].latest is not None and a[1].latest.active == ALL_TASKS, "a owns all")

    after = a[1].latest
    assert after is not None and after.generation > before.generation
    assert a[1].revoked == revoked_before, "cooperative: a never gave anything back"
    assert a[0].assigned_partitions == group.sources(ALL_TASKS)
    assert after.active_hosts == {"a:8080": ALL_TASKS}
    a[0].commit({(topic, 3): 99})  # fenced by the new generation
    assert a[0].committed([(topic, 3)]) == {(topic, 3): 99}


@pytest.mark.duration(11)
def test_a_newcomer_gets_tasks_in_a_follow_up_round_after_their_owner_revoked_them(
    group: Group,
) -> None:
    a = group.join("a")
    drive([a], lambda: settled([a]), "a to join")
    assert a[1].latest is not None and a[1].latest.active == ALL_TASKS
    revoked_at: dict[TaskId, int] = {}
    a[1].on_revoke = lambda: revoked_at.update(dict.fromkeys(a[1].owned, a[0].generation))

    b = group.join("b")
    longest = drive([a, b], lambda: settled([a, b]), "the move to finish")

    kept, moved = a[1].latest, b[1].latest
    assert kept is not None and moved is not None
    assert len(kept.active) == len(moved.active) == 4
    assert a[1].revoked == moved.active, "a handed over exactly what b got"
    # b never got a task in the generation in which a still owned it.
    for assignment in b[1].assignments:
        assert not (
            assignment.active & {t for t, g in revoked_at.items() if g >= assignment.generation}
        )
    assert kept.active <= a[1].assignments[0].active, "a's kept tasks never left it"
    assert longest < 1.0, f"a poll took {longest:.2f}s: a member must never block for a join"


def test_a_restarted_member_removes_its_crashed_predecessor_before_joining(
    group: Group,
) -> None:
    a = group.join("a")
    b = group.join("b")
    drive([a, b], lambda: settled([a, b]), "two members to settle")
    crashed_id = b[0].member_id
    b[0].close(leave=False)  # what kill -9 leaves behind: a member until its session ends

    restarted = group.join("b-restarted", stale_member_id=crashed_id)
    drive([a, restarted], lambda: settled([a, restarted]), "a and the restart to settle")

    # The first generation the restart is in already leaves the crashed member out: no
    # task waits for a member that will never process it.
    first = restarted[1].assignments[0]
    # The directory ("a") holds the generation's routing map.
    after = next(x for x in a[1].assignments if x.generation == first.generation)
    assert first.directory == after.directory == "a:8080"
    assert set(after.active_hosts) == {"a:8080", "b-restarted:8080"}
    assert frozenset().union(*after.active_hosts.values()) == ALL_TASKS
    assert crashed_id != restarted[0].member_id


@pytest.mark.duration(11)
def test_a_stale_members_commit_raises_task_migrated(group: Group) -> None:
    first = group.join("a")
    second = group.join("b")
    drive([first, second], lambda: settled([first, second]), "two members to settle")
    # The test broker keeps a departed leader as leader and wedges the group (it never
    # hands leadership on), so the member that goes stale must be the follower.
    a, b = (first, second) if first[0].is_leader else (second, first)
    assert a[0].is_leader and not b[0].is_leader
    stale_generation = b[0].generation
    topic = group.source_topics[0][0]

    # b stops polling; c joins; the group moves on without b taking part.
    c = group.join("c")
    drive(
        [a, c],
        lambda: settled([a, c]) and a[0].generation > stale_generation,
        "a and c to settle in a newer generation",
    )

    # b still believes it is in ``stale_generation``, so the commit goes out with it and
    # the broker rejects it (ILLEGAL_GENERATION). Real Kafka drops b after the rebalance
    # timeout; the test broker even keeps b in the new generation with its old
    # subscription, and still refuses the stale commit.
    with pytest.raises(TaskMigrated):
        b[0].commit({(topic, 0): 1})


def _roles(pairs: Sequence[Pair], task: TaskId) -> tuple[list[int], ...]:
    """Which members (by index) hold ``task`` as active, as standby and as warmup."""
    latest = [recorder.latest for _, recorder in pairs]
    assert all(a is not None for a in latest)
    return tuple(
        [i for i, a in enumerate(latest) if a is not None and task in getattr(a, role)]
        for role in ("active", "standby", "warmup")
    )


def test_three_members_with_one_standby_hold_every_task_once_as_active_and_once_as_standby(
    group: Group, changelog_topics: dict[int, list[str]]
) -> None:
    def join(name: str) -> Pair:
        end_offsets = Admin(group.settings(name)).end_offsets  # what the runtime passes
        return group.join(
            name,
            changelog_topics=changelog_topics,
            end_offsets=end_offsets,
            overrides={"num.standby.replicas": 1},
        )

    pairs = [join(name) for name in ("a", "b", "c")]
    drive(pairs, lambda: settled(pairs), "three members to settle")

    for task in ALL_TASKS:
        active, standby, warmup = _roles(pairs, task)
        assert len(active) == len(standby) == 1, task
        assert active != standby, task
        assert warmup == [], task
    latest = [r.latest for _, r in pairs]
    assert sorted(len(a.active) for a in latest if a is not None) == [2, 3, 3]
    assert latest[0] is not None
    assert latest[0].standby_hosts == {
        f"{n}:8080": a.standby for n, a in zip("abc", latest, strict=True) if a is not None
    }


def test_a_member_without_state_gets_warmups_while_the_caught_up_owner_keeps_its_tasks(
    group: Group, changelog_topics: dict[int, list[str]]
) -> None:
    ends = 1_000_000

    def end_offsets(partitions: Sequence[TP]) -> dict[TP, int]:
        return dict.fromkeys(partitions, ends)

    owner = group.join(
        "a",
        prev_active=ALL_TASKS,
        sums=dict.fromkeys(ALL_TASKS, ends),
        changelog_topics=changelog_topics,
        end_offsets=end_offsets,
    )
    # The owner settles alone first: on Kafka, whichever member's join reaches the broker
    # first completes a round alone and owns every task, so a newcomer polled first would
    # own them too and the premise would be lost.
    drive([owner], lambda: settled([owner]), "the owner to join")
    newcomer = group.join("b", changelog_topics=changelog_topics, end_offsets=end_offsets)
    pairs = [owner, newcomer]
    drive(pairs, lambda: settled(pairs), "two members to settle")

    kept, warming = owner[1].latest, newcomer[1].latest
    assert kept is not None and warming is not None
    assert kept.active == ALL_TASKS
    assert warming.active == frozenset()
    assert len(warming.warmup) == 2  # max.warmup.replicas
    assert warming.standby == ALL_TASKS - warming.warmup  # num.standby.replicas = 1
    assert newcomer[0].assigned_partitions == frozenset()
    assert kept.next_probe_ms > 0  # the probe goes to one member only: "a" sorts first
    assert warming.next_probe_ms == -1
    assert kept.standby_hosts["b:8080"] == ALL_TASKS  # warmups included
    assert not kept.standby_hosts.get("a:8080")


def _leader_first(pairs: list[Pair]) -> list[Pair]:
    """The group leader first (it runs ``assign``; the broker quirk is about its rejoin)."""
    return sorted(pairs, key=lambda pair: not pair[0].is_leader)


def _newer(pairs: Sequence[Pair], member: GroupMember, generation: int) -> Callable[[], bool]:
    return lambda: settled(pairs) and member.generation > generation


@pytest.mark.duration(11)
def test_a_requested_rebalance_brings_every_member_into_a_new_generation(group: Group) -> None:
    pairs = [group.join("a"), group.join("b")]
    drive(pairs, lambda: settled(pairs), "two members to settle")
    # On Kafka one member may have joined alone first and handed half over since.
    settled_revoked = [recorder.revoked for _, recorder in pairs]

    for requester, recorder in _leader_first(pairs):
        before = requester.generation
        member_id = requester.member_id

        requester.request_rebalance("test")
        drive(pairs, _newer(pairs, requester, before), "a new generation for every member")

        assert requester.member_id == member_id, "nobody left the group for it"
        assert recorder.latest is not None and len(recorder.latest.active) == 4
    for (_, recorder), revoked in zip(pairs, settled_revoked, strict=True):
        assert recorder.revoked == revoked, "a probing rebalance revokes nothing that stays"
    for name in "ab":
        registry = group.metrics[name].registry
        assert registry.get_sample_value("worker_probing_rebalances_total") == 1


def test_end_offsets_are_read_from_the_broker_and_unknown_partitions_left_out(
    group: Group, changelog_topics: dict[int, list[str]]
) -> None:
    topic = changelog_topics[0][0]
    producer = Producer({"bootstrap.servers": group.bootstrap})
    for i in range(3):  # one record per batch: ListOffsets is right for those here
        producer.produce(topic, value=b"v%d" % i, partition=1)
        producer.flush(10)

    found = Admin(group.settings("a")).end_offsets([(topic, 1), (topic, 2), ("no-such-topic", 0)])

    assert found == {(topic, 1): 3, (topic, 2): 0}
