"""The assignor adapter with fake cluster metadata and members: no broker needed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace

import orjson
import pytest
from kafka.coordinator.assignors.abstract import RebalanceProtocol
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from structlog.testing import capture_logs

from worker.assignment.model import (
    NO_PROBE,
    Assignment,
    MalformedUserData,
    Subscription,
    UnsupportedVersion,
    user_data_version,
)
from worker.assignment.planner import PlannerConfig
from worker.assignment.task_id import TP, TaskId
from worker.clock import FakeClock
from worker.events import MEMBERSHIP_ASSIGN
from worker.kafka.task_assignor import TaskAssignor

T = TaskId
SOURCES = {0: ["a"], 1: ["b", "c"]}
CHANGELOGS = {0: ["app-s0-changelog"], 1: ["app-s1a-changelog", "app-s1b-changelog"]}


class FakeCluster:
    def __init__(self, partitions: dict[str, int]) -> None:
        self._partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self._partitions.get(topic)
        return None if count is None else set(range(count))


def _member(member_id: str, user_data: bytes) -> SimpleNamespace:
    metadata = ConsumerProtocolSubscription(0, ["a", "b", "c"], user_data)
    return SimpleNamespace(member_id=member_id, group_instance_id=None, metadata=metadata)


def _sub(
    process: str,
    port: int,
    prev: set[TaskId] | None = None,
    sums: dict[TaskId, int] | None = None,
    standby: set[TaskId] | None = None,
) -> bytes:
    prev_active = frozenset(prev or ())
    reported = sums if sums is not None else dict.fromkeys(prev_active, 0)
    return Subscription(
        process, f"h:{port}", reported, prev_active, frozenset(standby or ())
    ).encode()


def _assign(
    members: list[SimpleNamespace],
    partitions: dict[str, int] | None = None,
    assignor: TaskAssignor | None = None,
) -> dict[str, tuple[set[tuple[str, int]], Assignment]]:
    cluster = FakeCluster(partitions or {"a": 4, "b": 4, "c": 4})
    result = (assignor or TaskAssignor(SOURCES, PlannerConfig())).assign(cluster, members)
    decoded = {}
    for member_id, protocol in result.items():
        assert isinstance(protocol, ConsumerProtocolAssignment)
        wire = ConsumerProtocolAssignment.decode(protocol.encode())
        owned = {(tp.topic, tp.partition) for tp in wire.partitions()}
        decoded[member_id] = (owned, Assignment.decode(bytes(wire.user_data)))
    return decoded


class EndOffsets:
    """An end-offset source that records its calls; ``error`` makes it raise."""

    def __init__(self, ends: dict[TP, int], error: Exception | None = None) -> None:
        self.ends = ends
        self.error = error
        self.calls: list[list[TP]] = []

    def __call__(self, partitions: Sequence[TP]) -> dict[TP, int]:
        self.calls.append(list(partitions))
        if self.error is not None:
            raise self.error
        return {tp: self.ends[tp] for tp in partitions if tp in self.ends}


def _ends(value: int) -> dict[TP, int]:
    return {
        (topic, p): value for topics in CHANGELOGS.values() for topic in topics for p in range(4)
    }


def _ha_assignor(
    end_offsets: EndOffsets, config: PlannerConfig | None = None, clock: FakeClock | None = None
) -> TaskAssignor:
    return TaskAssignor(
        SOURCES,
        config or PlannerConfig(num_standby_replicas=1, probing_rebalance_interval_ms=60_000),
        changelog_topics=CHANGELOGS,
        end_offsets=end_offsets,
        clock=clock or FakeClock(1_000.0),
    )


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


def _old_member_sub(process: str, port: int) -> bytes:
    """What a worker that reads only version 1 subscribes with."""
    raw = orjson.loads(Subscription(process, f"h:{port}", {}, frozenset(), frozenset()).encode(1))
    return orjson.dumps({**raw, "latest_supported": 1})


def test_with_every_member_on_version_2_only_the_directory_carries_the_host_map() -> None:
    result = _assign([_member("m2", _sub("p2", 2)), _member("m1", _sub("p1", 1))])
    directory, other = result["m1"][1], result["m2"][1]
    assert directory.active_hosts == {"h:1": directory.active, "h:2": other.active}
    assert other.active_hosts == other.standby_hosts == {}
    assert directory.directory == other.directory == "h:1"
    assert directory.next_probe_ms == -1


def test_while_one_member_reads_only_version_1_every_member_gets_the_whole_host_map() -> None:
    cluster = FakeCluster({"a": 4, "b": 4, "c": 4})
    members = [_member("m1", _sub("p1", 1)), _member("m2", _old_member_sub("p2", 2))]
    result = TaskAssignor(SOURCES, PlannerConfig()).assign(cluster, members)
    for protocol in result.values():
        assert user_data_version(bytes(protocol.user_data)) == 1
        assignment = Assignment.decode(bytes(protocol.user_data))
        assert set(assignment.active_hosts) == {"h:1", "h:2"}
        assert assignment.directory == ""


def test_subscriptions_follow_the_version_of_the_last_assignment_received() -> None:
    assignor = TaskAssignor(SOURCES, PlannerConfig())
    subscription = Subscription("p1", "h:1", {T(0, 0): 5}, frozenset(), frozenset())

    def sent_version() -> int:
        assignor.set_subscription(subscription)
        return user_data_version(bytes(assignor.metadata({"a"}).user_data))

    assert sent_version() == 1  # any leader, old or new, reads it
    for version in (2, 1, 2):
        encoded = Assignment.empty().encode(version)
        assignor.on_assignment(ConsumerProtocolAssignment(0, [], encoded), version)
        assert sent_version() == version
    assignor.on_assignment(ConsumerProtocolAssignment(0, [], b"garbage"), 9)
    assert sent_version() == 2, "an unreadable assignment teaches nothing"


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
        (orjson.dumps({"version": 3}), UnsupportedVersion),
        (b"\xb7\x03", UnsupportedVersion),
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


def test_every_task_has_an_active_and_a_standby_on_different_members() -> None:
    members = [_member(f"m{i}", _sub(f"p{i}", i)) for i in (1, 2, 3)]
    result = _assign(members, assignor=_ha_assignor(EndOffsets(_ends(0))))
    for task in _all_tasks():
        active = [m for m, (_, a) in result.items() if task in a.active]
        standby = [m for m, (_, a) in result.items() if task in a.standby]
        assert len(active) == len(standby) == 1
        assert active != standby
    hosts = result["m1"][1].standby_hosts
    assert hosts == {f"h:{i}": result[f"m{i}"][1].standby for i in (1, 2, 3)}


def test_a_newcomer_gets_warmups_while_the_caught_up_owner_keeps_running() -> None:
    clock = FakeClock(1_000.0)
    owner = _sub("p1", 1, _all_tasks(), sums=dict.fromkeys(_all_tasks(), 900_000))
    members = [_member("m1", owner), _member("m2", _sub("p2", 2))]
    ends = EndOffsets(_ends(1_000_000))

    result = _assign(members, assignor=_ha_assignor(ends, clock=clock))

    (_, first), (_, second) = result["m1"], result["m2"]
    assert first.active == _all_tasks()
    assert second.active == frozenset()
    assert len(second.warmup) == 2  # the default max.warmup.replicas
    assert first.next_probe_ms == 1_000_000 + 60_000
    assert second.next_probe_ms == NO_PROBE
    # Warmups count as standby hosts for routing; the warmup tasks have no plain standby.
    assert first.standby_hosts["h:2"] == second.standby | second.warmup
    assert not second.warmup & second.standby


def test_end_offsets_are_asked_for_every_changelog_partition_once() -> None:
    ends = EndOffsets(_ends(0))
    _assign([_member("m1", _sub("p1", 1))], assignor=_ha_assignor(ends))
    assert len(ends.calls) == 1
    assert sorted(ends.calls[0]) == sorted(_ends(0))


def test_under_reported_end_offsets_are_raised_to_what_members_report() -> None:
    # The test broker's ListOffsets says 1 where the fetch path serves 1,000,000 records.
    sums = dict.fromkeys(_all_tasks(), 1_000_000)
    members = [_member("m1", _sub("p1", 1, sums=sums)), _member("m2", _sub("p2", 2))]
    result = _assign(members, assignor=_ha_assignor(EndOffsets(_ends(1))))
    # p1 has everything but runs nothing; p2 has nothing: p1 is caught up, so it runs
    # all and p2 warms up, rather than p2 being taken for caught up.
    assert result["m1"][1].active == _all_tasks()
    assert len(result["m2"][1].warmup) == 2


@pytest.mark.parametrize("error", [RuntimeError("admin down"), TimeoutError()])
def test_failing_end_offsets_fall_back_to_the_members_reports(error: Exception) -> None:
    sums = dict.fromkeys(_all_tasks(), 500)
    members = [_member("m1", _sub("p1", 1, sums=sums)), _member("m2", _sub("p2", 2))]
    config = PlannerConfig(acceptable_recovery_lag=100)
    result = _assign(members, assignor=_ha_assignor(EndOffsets({}, error), config))
    assert result["m1"][1].active == _all_tasks()
    assert len(result["m2"][1].warmup) == 2


def test_without_an_end_offset_source_members_with_no_state_share_tasks_evenly() -> None:
    assignor = TaskAssignor(SOURCES, PlannerConfig(), changelog_topics=CHANGELOGS)
    result = _assign(
        [_member("m1", _sub("p1", 1)), _member("m2", _sub("p2", 2))], assignor=assignor
    )
    assert len(result["m1"][1].active) == len(result["m2"][1].active) == 4


def test_stateless_tasks_get_no_standbys_and_are_handed_over_first() -> None:
    assignor = TaskAssignor(
        SOURCES,
        PlannerConfig(num_standby_replicas=1),
        changelog_topics={1: CHANGELOGS[1]},
        end_offsets=EndOffsets(_ends(10**6)),
        clock=FakeClock(),
    )
    owner = _sub("p1", 1, _all_tasks())
    result = _assign([_member("m1", owner), _member("m2", _sub("p2", 2))], assignor=assignor)
    stateless = {T(0, p) for p in range(4)}
    assert not any(stateless & a.standby for _, a in result.values())
    assert not any(stateless & a.warmup for _, a in result.values())
    # Nothing to restore: balance moves the stateless tasks and nothing else, in the
    # follow-up round (m1 owns them now); nobody holds them meanwhile.
    assert result["m1"][1].active == _all_tasks() - stateless
    assert result["m2"][1].active == frozenset()
    assert result["m1"][1].next_probe_ms == NO_PROBE

    follow_up = [
        _member("m1", _sub("p1", 1, _all_tasks() - stateless)),
        _member("m2", _sub("p2", 2)),
    ]
    result = _assign(follow_up, assignor=assignor)
    assert result["m2"][1].active == stateless
    assert result["m2"][0] == _sources(frozenset(stateless))


def test_the_probe_goes_to_the_lowest_client_key_only() -> None:
    owner = _sub("p2", 2, _all_tasks())
    members = [_member("m1", _sub("p3", 3)), _member("m2", owner), _member("m3", _sub("p1", 1))]
    result = _assign(members, assignor=_ha_assignor(EndOffsets(_ends(10**6))))
    probes = {m: a.next_probe_ms for m, (_, a) in result.items()}
    assert probes["m3"] > 0
    assert probes["m1"] == probes["m2"] == NO_PROBE


def test_the_assignor_declares_the_cooperative_protocol_only() -> None:
    assignor = TaskAssignor(SOURCES, PlannerConfig())
    assert assignor.supported_protocols() == [RebalanceProtocol.COOPERATIVE]


def _caught_up_newcomer_round(assignor: TaskAssignor) -> dict[str, tuple[set[TP], Assignment]]:
    """m1 runs every task; m2 joins with state as current as m1's."""
    sums = dict.fromkeys(_all_tasks(), 1_000_000)
    members = [
        _member("m1", _sub("p1", 1, _all_tasks(), sums=sums)),
        _member("m2", _sub("p2", 2, sums=sums)),
    ]
    return _assign(members, assignor=assignor)


def test_a_task_changing_owner_is_withheld_for_a_round_and_its_partitions_go_to_nobody() -> None:
    assignor = _ha_assignor(EndOffsets(_ends(1_000_000)))
    with capture_logs() as logs:
        result = _caught_up_newcomer_round(assignor)

    (owned_1, first), (owned_2, second) = result["m1"], result["m2"]
    withheld = _all_tasks() - first.active
    assert len(first.active) == 4
    assert second.active == frozenset() and owned_2 == set()
    assert owned_1 == _sources(first.active)
    # The intended owner tails them as standbys meanwhile; no warmup is needed.
    assert withheld <= second.standby
    assert second.warmup == frozenset()
    # The directory's map routes the moving tasks to h:2, which runs them on the release.
    assert first.active_hosts == {"h:1": first.active, "h:2": withheld}
    (event,) = [e for e in logs if e["event"] == MEMBERSHIP_ASSIGN]
    assert event["pending_moves"] == 4
    assert event["moves"] == [f"{task}->p2" for task in sorted(withheld)]


def test_the_follow_up_round_gives_withheld_tasks_to_their_intended_owner() -> None:
    assignor = _ha_assignor(EndOffsets(_ends(1_000_000)))
    first = _caught_up_newcomer_round(assignor)
    kept, interim = first["m1"][1].active, first["m2"][1].standby
    # m1 revoked the others and still reports their state (it ran them until then), as
    # current as m2's standbys.
    sums = dict.fromkeys(_all_tasks(), 1_000_000)
    members = [
        _member("m1", _sub("p1", 1, set(kept), sums=sums)),
        _member("m2", _sub("p2", 2, sums=sums, standby=set(interim))),
    ]
    with capture_logs() as logs:
        result = _assign(members, assignor=assignor)

    assert result["m1"][1].active == kept
    assert result["m2"][1].active == _all_tasks() - kept
    assert result["m2"][0] == _sources(result["m2"][1].active)
    (event,) = [e for e in logs if e["event"] == MEMBERSHIP_ASSIGN]
    assert event["pending_moves"] == 0


def test_every_member_learns_the_moves_under_way_and_a_new_leader_finishes_them() -> None:
    first = _caught_up_newcomer_round(_ha_assignor(EndOffsets(_ends(1_000_000))))
    kept, interim = first["m1"][1].active, first["m2"][1].standby
    moves = first["m2"][1].pending_moves
    assert first["m1"][1].pending_moves == moves == dict.fromkeys(_all_tasks() - kept, "p2")
    # The follow-up round is planned by a leader that did not plan the first one: it
    # knows the moves only from what the members echo in their subscriptions.
    sums = dict.fromkeys(_all_tasks(), 1_000_000)

    def echo(process: str, port: int, prev: set[TaskId], standby: set[TaskId]) -> bytes:
        sub = Subscription.decode(_sub(process, port, prev, sums=sums, standby=standby))
        return replace(sub, pending_moves=moves).encode()

    members = [
        _member("m1", echo("p1", 1, set(kept), set())),
        _member("m2", echo("p2", 2, set(), set(interim))),
    ]
    result = _assign(members, assignor=_ha_assignor(EndOffsets(_ends(1_000_000))))

    assert result["m2"][1].active == _all_tasks() - kept
    assert result["m1"][1].active == kept
    assert result["m2"][1].pending_moves == {}


def test_a_member_is_told_only_the_moves_it_takes_part_in() -> None:
    sums = dict.fromkeys(_all_tasks(), 1_000_000)
    members = [
        _member("m1", _sub("p1", 1, _all_tasks(), sums=sums)),
        _member("m2", _sub("p2", 2, sums=sums)),
        _member("m3", _sub("p3", 3)),
    ]
    result = _assign(members, assignor=_ha_assignor(EndOffsets(_ends(1_000_000))))
    moves = {**result["m1"][1].pending_moves}
    assert moves and set(moves.values()) <= {"p2", "p3"}
    for member, process in (("m2", "p2"), ("m3", "p3")):
        mine = {t: target for t, target in moves.items() if target == process}
        assert result[member][1].pending_moves == mine
