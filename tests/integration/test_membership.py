"""GroupMember against the real broker: task split, host maps, commits, leaving, fencing.

Two or three members live in this one test process, each driven by ``poll`` from the
test thread inside ``wait_until``. Joins on the test broker take ~3 s per round.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.waiting import wait_until
from worker.assignment.model import Assignment, Subscription
from worker.assignment.task_id import TaskId
from worker.config import Settings
from worker.errors import TaskMigrated
from worker.kafka.membership import GroupMember
from worker.observability import Metrics

pytestmark = pytest.mark.integration

PARTITIONS = 4
JOIN_TIMEOUT = 45.0
ALL_TASKS = frozenset(TaskId(s, p) for s in (0, 1) for p in range(PARTITIONS))


class Recorder:
    """A RebalanceListener that records what it is told, and optionally acts on revoke."""

    def __init__(self) -> None:
        self.events: list[str | Assignment] = []
        self.on_revoke: Callable[[], None] | None = None

    def on_revoked(self) -> None:
        self.events.append("revoked")
        if self.on_revoke is not None:
            self.on_revoke()

    def on_assigned(self, assignment: Assignment) -> None:
        self.events.append(assignment)

    @property
    def assignments(self) -> list[Assignment]:
        return [e for e in self.events if isinstance(e, Assignment)]

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


class Group:
    """Members of one fresh group (one application id) and their recorders."""

    def __init__(self, bootstrap: str, source_topics: dict[int, list[str]]) -> None:
        self.bootstrap = bootstrap
        self.source_topics = source_topics
        self.application_id = f"membership-{uuid.uuid4().hex[:10]}"
        self.members: list[GroupMember] = []

    def join(
        self, name: str, prev_active: frozenset[TaskId] = frozenset()
    ) -> tuple[GroupMember, Recorder]:
        settings = Settings.model_validate(
            {
                "application.id": self.application_id,
                "bootstrap.servers": self.bootstrap,
                "application.server": f"{name}:8080",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "max.poll.interval.ms": 10000,
            }
        )
        recorder = Recorder()
        sums = dict.fromkeys(prev_active, -2)

        def subscription() -> Subscription:
            return Subscription(name, settings.endpoint(), sums, prev_active, frozenset())

        member = GroupMember(settings, self.source_topics, subscription, recorder, Metrics())
        member.start()
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


def drive(members: Sequence[GroupMember], done: Callable[[], object], message: str) -> None:
    """Poll every member from its own thread, as separate worker processes would, until
    ``done()`` holds. (A join blocks inside ``poll``; one thread cannot drive two members.)"""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(member: GroupMember) -> None:
        try:
            while not stop.is_set():
                member.poll(20)
                stop.wait(0.02)
        except BaseException as exc:  # surfaced to the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: errors or done(), JOIN_TIMEOUT, interval=0.05, message=message)
    finally:
        stop.set()
        for thread in threads:
            thread.join(JOIN_TIMEOUT)
    if errors:
        raise errors[0]


def settled(pairs: Sequence[tuple[GroupMember, Recorder]]) -> bool:
    """Every member holds an assignment of the generation it is in, all the same one."""
    generations = set()
    for member, recorder in pairs:
        latest = recorder.latest
        if latest is None or latest.generation != member.generation:
            return False
        generations.add(latest.generation)
    return len(generations) == 1


def test_two_members_split_the_tasks_evenly_and_see_each_others_hosts(group: Group) -> None:
    a = group.join("a")
    b = group.join("b")
    drive([a[0], b[0]], lambda: settled([a, b]), "two members to settle")

    first, second = a[1].latest, b[1].latest
    assert first is not None and second is not None
    assert len(first.active) == len(second.active) == 4
    assert first.active | second.active == ALL_TASKS
    assert a[0].assigned_partitions == group.sources(first.active)
    assert b[0].assigned_partitions == group.sources(second.active)
    hosts = {"a:8080": first.active, "b:8080": second.active}
    assert first.active_hosts == second.active_hosts == hosts
    assert first.standby == first.warmup == frozenset()
    assert first.next_probe_ms == -1
    assert a[0].member_id and a[0].member_id != b[0].member_id


def test_previous_actives_reported_in_the_subscription_are_kept(group: Group) -> None:
    mine = frozenset(t for t in ALL_TASKS if t.partition >= 2)
    a = group.join("a", prev_active=mine)
    b = group.join("b", prev_active=ALL_TASKS - mine)
    drive([a[0], b[0]], lambda: settled([a, b]), "two members to settle")

    assert a[1].latest is not None and a[1].latest.active == mine
    assert b[1].latest is not None and b[1].latest.active == ALL_TASKS - mine


def test_a_commit_is_read_back_by_committed(group: Group) -> None:
    member, recorder = group.join("a")
    drive([member], lambda: settled([(member, recorder)]), "the member to join")
    topic = group.source_topics[0][0]

    member.commit({(topic, 0): 42, (topic, 1): 7})

    assert member.committed([(topic, 0), (topic, 1), (topic, 2)]) == {
        (topic, 0): 42,
        (topic, 1): 7,
        (topic, 2): None,
    }


def test_when_a_member_leaves_the_other_revokes_commits_and_gets_every_task(
    group: Group,
) -> None:
    a = group.join("a")
    b = group.join("b")
    drive([a[0], b[0]], lambda: settled([a, b]), "two members to settle")
    topic = group.source_topics[0][0]
    before = a[1].latest
    assert before is not None
    # Eager protocol: a commit inside on_revoked is still fenced by the old generation.
    a[1].on_revoke = lambda: a[0].commit({(topic, 3): 99})

    b[0].close()
    drive(
        [a[0]], lambda: a[1].latest is not None and a[1].latest.active == ALL_TASKS, "a to own all"
    )

    after = a[1].latest
    assert after is not None and after.generation > before.generation
    assert a[1].events[-2:] == ["revoked", after]
    assert a[0].assigned_partitions == group.sources(ALL_TASKS)
    assert after.active_hosts == {"a:8080": ALL_TASKS}
    assert a[0].committed([(topic, 3)]) == {(topic, 3): 99}


def test_a_stale_members_commit_raises_task_migrated(group: Group) -> None:
    a = group.join("a")
    b = group.join("b")
    drive([a[0], b[0]], lambda: settled([a, b]), "two members to settle")
    stale_generation = b[0].generation
    topic = group.source_topics[0][0]

    # b stops polling; c joins; the group moves on without b taking part.
    c = group.join("c")
    drive(
        [a[0], c[0]],
        lambda: settled([a, c]) and a[0].generation > stale_generation,
        "a and c to settle in a newer generation",
    )

    # b still believes it is in ``stale_generation``, so the commit goes out with it and
    # the broker rejects it (ILLEGAL_GENERATION). Real Kafka drops b after the rebalance
    # timeout; the test broker even keeps b in the new generation with its old
    # subscription, and still refuses the stale commit.
    with pytest.raises(TaskMigrated):
        b[0].commit({(topic, 0): 1})
