"""The subscription and assignment user-data formats: round trips, versions, bad input."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from worker.assignment.model import (
    ASSIGNMENT_VERSION,
    BINARY_MARKER,
    JSON_VERSION,
    LATEST_OFFSET,
    SUBSCRIPTION_VERSION,
    Assignment,
    MalformedUserData,
    Subscription,
    UnsupportedVersion,
    UserDataError,
    decode_routing,
    encode_routing,
    user_data_version,
)
from worker.assignment.task_id import TaskId
from worker.errors import WorkerError

T = TaskId


def _subscription() -> Subscription:
    return Subscription(
        process_id="8d6f0c1e-0000-4000-8000-000000000001",
        endpoint="10.0.0.1:8080",
        task_offset_sums={T(0, 1): LATEST_OFFSET, T(1, 3): 1234},
        prev_active=frozenset({T(0, 1)}),
        prev_standby=frozenset({T(1, 3)}),
        rebalance_requests=3,
        pending_moves={T(0, 2): "8d6f0c1e-0000-4000-8000-000000000002"},
    )


def _assignment() -> Assignment:
    return Assignment(
        active=frozenset({T(0, 1), T(1, 1)}),
        standby=frozenset({T(0, 2)}),
        warmup=frozenset({T(1, 2)}),
        active_hosts={"a:1": frozenset({T(0, 1), T(1, 1)}), "b:2": frozenset({T(0, 2)})},
        standby_hosts={"a:1": frozenset({T(0, 2)})},
        next_probe_ms=1_700_000_000_000,
        pending_moves={T(0, 3): "b"},
    )


VERSIONS = [JSON_VERSION, SUBSCRIPTION_VERSION]


@pytest.mark.parametrize("version", VERSIONS)
def test_subscription_round_trips(version: int) -> None:
    sub = _subscription()
    assert Subscription.decode(sub.encode(version)) == sub
    assert user_data_version(sub.encode(version)) == version


def test_a_process_id_that_is_not_a_canonical_uuid_round_trips_as_text() -> None:
    for process_id in ("worker-a", "8D6F0C1E-0000-4000-8000-000000000001", "p/member-1"):
        sub = Subscription(process_id, "", {}, frozenset(), frozenset(), 0, {T(0, 0): "x/y"})
        assert Subscription.decode(sub.encode()) == sub


def test_subscription_encoding_is_deterministic_and_versioned() -> None:
    sub = _subscription()
    shuffled = Subscription(
        sub.process_id,
        sub.endpoint,
        dict(reversed(list(sub.task_offset_sums.items()))),
        sub.prev_active,
        sub.prev_standby,
        sub.rebalance_requests,
        dict(reversed(list(sub.pending_moves.items()))),
    )
    assert sub.encode() == shuffled.encode()
    assert sub.encode(JSON_VERSION) == shuffled.encode(JSON_VERSION)
    assert sub.encode()[0] == BINARY_MARKER
    raw = orjson.loads(sub.encode(JSON_VERSION))
    assert raw["version"] == JSON_VERSION
    assert raw["latest_supported"] == SUBSCRIPTION_VERSION
    assert raw["offset_sums"] == {"0_1": -2, "1_3": 1234}


@pytest.mark.parametrize("version", [JSON_VERSION, ASSIGNMENT_VERSION])
def test_assignment_round_trips_without_its_generation(version: int) -> None:
    assignment = _assignment().with_generation(7)
    decoded = Assignment.decode(assignment.encode(version))
    assert decoded.generation == -1
    assert decoded == assignment.with_generation(-1)
    assert Assignment.decode(assignment.encode(version), generation=7) == assignment
    assert "generation" not in orjson.loads(assignment.encode(JSON_VERSION))


def test_the_directory_travels_in_version_2_only() -> None:
    assignment = replace(_assignment(), directory="a:1")
    assert Assignment.decode(assignment.encode()).directory == "a:1"
    assert Assignment.decode(assignment.encode(JSON_VERSION)).directory == ""


def test_an_assignment_without_host_maps_is_a_fraction_of_the_json_one() -> None:
    tasks = frozenset(T(0, p) for p in range(0, 10_000, 1000))
    hosts = {f"10.0.{i // 250}.{i % 250}:8080": frozenset({T(0, i)}) for i in range(1000)}
    follower = Assignment(tasks, tasks, frozenset(), {}, {}, directory="10.0.0.0:8080")
    assert len(follower.encode()) < 80
    assert len(follower.encode()) * 10 < len(replace(follower, active_hosts=hosts).encode(1))


def test_a_routing_map_round_trips_with_its_generation() -> None:
    assignment = _assignment()
    data = encode_routing(9, assignment.active_hosts, assignment.standby_hosts)
    assert decode_routing(data) == (9, assignment.active_hosts, assignment.standby_hosts)
    with pytest.raises(MalformedUserData):
        decode_routing(b'{"version": 2}')
    with pytest.raises(MalformedUserData):
        decode_routing(data[:-1])


def test_an_encoder_refuses_a_version_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="version 3"):
        _subscription().encode(3)
    with pytest.raises(ValueError, match="version 0"):
        _assignment().encode(0)


def test_empty_assignment_round_trips() -> None:
    assert Assignment.decode(Assignment.empty().encode()) == Assignment.empty()
    assert Assignment.empty(generation=3).generation == 3
    assert Assignment.empty().next_probe_ms == -1


def test_collections_are_frozen_on_construction() -> None:
    sub = Subscription("p", "h:1", {T(0, 0): 5}, {T(0, 0)}, set())  # type: ignore[arg-type]
    assert isinstance(sub.prev_active, frozenset)
    with pytest.raises(TypeError):
        sub.task_offset_sums[T(0, 1)] = 3  # type: ignore[index]
    assignment = Assignment({T(0, 0)}, set(), set(), {"h:1": {T(0, 0)}}, {})  # type: ignore[arg-type,dict-item]
    assert assignment.active_hosts["h:1"] == frozenset({T(0, 0)})
    with pytest.raises(TypeError):
        assignment.active_hosts["x:1"] = frozenset()  # type: ignore[index]


@pytest.mark.parametrize(
    ("decode", "kind", "supported"),
    [
        (Subscription.decode, "subscription", SUBSCRIPTION_VERSION),
        (Assignment.decode, "assignment", ASSIGNMENT_VERSION),
    ],
)
@pytest.mark.parametrize("binary", [False, True])
def test_a_newer_version_is_rejected_with_a_message_naming_both_versions(
    decode: object, kind: str, supported: int, binary: bool
) -> None:
    data = orjson.dumps({"version": supported + 1, "process_id": "p", "future_field": [1]})
    if binary:
        data = bytes((BINARY_MARKER, supported + 1)) + b"future fields"
    with pytest.raises(UnsupportedVersion) as info:
        decode(data)  # type: ignore[operator]
    assert isinstance(info.value, WorkerError)
    assert info.value.version == supported + 1
    message = str(info.value)
    assert kind in message
    assert f"version {supported + 1}" in message
    assert f"up to version {supported}" in message


def test_unknown_fields_of_a_known_version_are_ignored() -> None:
    raw = orjson.loads(_subscription().encode(JSON_VERSION))
    raw["client_tags"] = {"rack": "a"}
    assert Subscription.decode(orjson.dumps(raw)) == _subscription()
    assert Subscription.decode(_subscription().encode() + b"\x05later") == _subscription()
    assert Assignment.decode(_assignment().encode() + b"\x01") == _assignment()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x01binary",
        b"[1, 2]",
        b'{"process_id": "p"}',
        b'{"version": "1", "process_id": "p"}',
        b'{"version": 0, "process_id": "p"}',
        b'{"version": 1}',
        b'{"version": 1, "process_id": 7}',
        b'{"version": 1, "process_id": "p", "offset_sums": {"zero_1": 3}}',
        b'{"version": 1, "process_id": "p", "offset_sums": {"0_1": "3"}}',
        b'{"version": 1, "process_id": "p", "prev_active": "0_1"}',
        b'{"version": 2, "process_id": "p"}',
        bytes((BINARY_MARKER,)),
        bytes((BINARY_MARKER, 1)) + b"p",
        bytes((BINARY_MARKER, 2, 2, 0, 1)),
        _subscription().encode()[:-3],
    ],
)
def test_malformed_subscriptions_raise_a_user_data_error(data: bytes) -> None:
    with pytest.raises(MalformedUserData):
        Subscription.decode(data)


@pytest.mark.parametrize(
    "data",
    [
        b"nope",
        b'{"version": 1, "active": ["0_x"]}',
        b'{"version": 1, "active_hosts": {"h:1": "0_1"}}',
        b'{"version": 1, "next_probe_ms": 1.5}',
        bytes((BINARY_MARKER, 2, 1)),
        _assignment().encode()[:-2],
    ],
)
def test_malformed_assignments_raise_a_user_data_error(data: bytes) -> None:
    with pytest.raises(UserDataError):
        Assignment.decode(data)


@pytest.mark.parametrize("version", [JSON_VERSION, SUBSCRIPTION_VERSION])
def test_a_leaving_member_says_so_in_either_version(version: int) -> None:
    leaving = replace(_subscription(), leaving=True)
    assert Subscription.decode(leaving.encode(version)) == leaving
    assert not Subscription.decode(_subscription().encode(version)).leaving


def test_a_subscription_of_a_worker_that_predates_the_member_flags_is_not_leaving() -> None:
    data = _subscription().encode()
    older = data[:-1]  # the flags are the last field, a single byte when 0
    assert Subscription.decode(older) == _subscription()
