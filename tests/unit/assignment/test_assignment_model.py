"""The subscription and assignment user-data formats: round trips, versions, bad input."""

from __future__ import annotations

import orjson
import pytest

from worker.assignment.model import (
    ASSIGNMENT_VERSION,
    LATEST_OFFSET,
    SUBSCRIPTION_VERSION,
    Assignment,
    MalformedUserData,
    Subscription,
    UnsupportedVersion,
    UserDataError,
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


def test_subscription_round_trips() -> None:
    sub = _subscription()
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
    raw = orjson.loads(sub.encode())
    assert raw["version"] == SUBSCRIPTION_VERSION
    assert raw["latest_supported"] == SUBSCRIPTION_VERSION
    assert raw["offset_sums"] == {"0_1": -2, "1_3": 1234}


def test_assignment_round_trips_without_its_generation() -> None:
    assignment = _assignment().with_generation(7)
    decoded = Assignment.decode(assignment.encode())
    assert decoded.generation == -1
    assert decoded == assignment.with_generation(-1)
    assert Assignment.decode(assignment.encode(), generation=7) == assignment
    assert "generation" not in orjson.loads(assignment.encode())


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
def test_a_newer_version_is_rejected_with_a_message_naming_both_versions(
    decode: object, kind: str, supported: int
) -> None:
    data = orjson.dumps({"version": supported + 1, "process_id": "p", "future_field": [1]})
    with pytest.raises(UnsupportedVersion) as info:
        decode(data)  # type: ignore[operator]
    assert isinstance(info.value, WorkerError)
    assert info.value.version == supported + 1
    message = str(info.value)
    assert kind in message
    assert f"version {supported + 1}" in message
    assert f"up to version {supported}" in message


def test_unknown_fields_of_a_known_version_are_ignored() -> None:
    raw = orjson.loads(_subscription().encode())
    raw["client_tags"] = {"rack": "a"}
    assert Subscription.decode(orjson.dumps(raw)) == _subscription()


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
    ],
)
def test_malformed_assignments_raise_a_user_data_error(data: bytes) -> None:
    with pytest.raises(UserDataError):
        Assignment.decode(data)
