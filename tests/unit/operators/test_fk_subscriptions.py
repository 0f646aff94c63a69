"""The foreign-key join's messages and subscription keys: each round-trips through its
serde, malformed bytes are a SerdeError, and the subscribers of one foreign key share
one key prefix that no other foreign key's keys start with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.operators.joins.subscriptions import (
    Instruction,
    Response,
    ResponseSerde,
    Subscription,
    SubscriptionSerde,
    subscriber,
    subscriber_prefix,
    subscription_key,
    value_hash,
)
from worker.serde import JSON, STR, Codec, SerdeError

HASH = bytes(range(16))


@given(pk=st.text(), subscribe=st.booleans())
def test_a_subscription_round_trips(pk: str, subscribe: bool) -> None:
    serde = SubscriptionSerde(STR)
    sub = (
        Subscription(Instruction.SUBSCRIBE, pk, HASH)
        if subscribe
        else Subscription(Instruction.UNSUBSCRIBE, pk, None)
    )
    assert serde.deserialize(serde.serialize(sub)) == sub


@given(right=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text()))
def test_a_response_round_trips_with_or_without_a_right_value(right: object) -> None:
    serde = ResponseSerde(JSON)
    assert serde.deserialize(serde.serialize(Response(HASH, right))) == Response(HASH, right)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x01\x01" + HASH, b"\x00\x07" + HASH, b"\x00\x01" + HASH[:5]],
)
def test_a_malformed_subscription_is_a_serde_error(data: bytes) -> None:
    with pytest.raises(SerdeError):
        SubscriptionSerde(STR).deserialize(data)


def test_a_subscribe_without_its_hash_cannot_be_written() -> None:
    with pytest.raises(SerdeError, match="16-byte hash"):
        SubscriptionSerde(STR).serialize(Subscription(Instruction.SUBSCRIBE, "pk", b"short"))


@given(fk=st.binary(), other=st.binary(), pk=st.binary())
def test_subscribers_of_a_foreign_key_share_a_prefix_no_other_key_has(
    fk: bytes, other: bytes, pk: bytes
) -> None:
    key = subscription_key(fk, pk)
    assert key.startswith(subscriber_prefix(fk))
    assert subscriber(key) == pk
    if other != fk:
        assert not subscription_key(other, pk).startswith(subscriber_prefix(fk))


def test_the_hash_tells_values_apart_and_equal_values_together() -> None:
    codec = Codec(JSON)
    assert value_hash(codec, {"a": 1}) == value_hash(codec, {"a": 1})
    assert value_hash(codec, {"a": 1}) != value_hash(codec, {"a": 2})
    assert len(value_hash(codec, "x")) == 16
