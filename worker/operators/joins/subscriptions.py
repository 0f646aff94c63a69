"""What the foreign-key join's two sides send each other, and how the right side keys its
subscriptions (Kafka Streams' KIP-213 ``SubscriptionWrapper``, ``SubscriptionResponseWrapper``
and ``CombinedKey``).

A left row subscribes to the right row its foreign key names with a :class:`Subscription`
(keyed by the foreign key on the subscription topic); the right side answers with a
:class:`Response` (keyed by the left row's primary key on the response topic) carrying
the hash of the left value it answers for, so the left side can drop an answer to a value
it no longer holds. The hash is of the left value as its serde writes it: 128 bits of
BLAKE2b, where Kafka Streams uses 128 bits of murmur3.

On the wire, a version byte first (0) so the formats can change:

- subscription: version, instruction (1: subscribe, 2: unsubscribe), the 16-byte hash
  (subscribe only), the primary key's bytes;
- response: version, a flag (1: a right value follows), the 16-byte hash, the right
  value's bytes.

The right side's subscription store keys each subscription by the foreign key's length
(4 bytes big-endian), its bytes, then the primary key's bytes: every subscriber of one
foreign key shares the prefix of that key, so a right-side change finds them all with one
prefix scan.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from worker.serde import Codec, Serde, SerdeError

VERSION = 0
HASH_SIZE = 16
_LENGTH = struct.Struct(">I")


class Instruction(enum.IntEnum):
    """What a subscription asks of the right side."""

    SUBSCRIBE = 1  # store (or refresh) the subscription and answer with the right value
    UNSUBSCRIBE = 2  # forget it (the left row's foreign key moved away or it was deleted)


@dataclass(frozen=True, slots=True)
class Subscription:
    """Left row ``pk`` (un)subscribing; ``value_hash`` of its value for a subscribe."""

    instruction: Instruction
    pk: Any
    value_hash: bytes | None


@dataclass(frozen=True, slots=True)
class Response:
    """The right row (``right``: None when there is none) for the left value hashed
    ``value_hash``."""

    value_hash: bytes
    right: Any


def value_hash(codec: Codec, value: Any) -> bytes:
    """The hash of a left value as ``codec`` writes it."""
    data = codec.encode(value) or b""
    return hashlib.blake2b(data, digest_size=HASH_SIZE).digest()


class SubscriptionSerde:
    """A :class:`Subscription`, its primary key written by ``pk_serde``."""

    name = "fk-subscription"

    def __init__(self, pk_serde: Serde) -> None:
        self._pk = Codec(pk_serde)

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, Subscription):
            raise SerdeError(f"not a Subscription: {type(value).__name__}")
        pk = self._pk.encode(value.pk)
        if pk is None:
            raise SerdeError("a subscription needs a primary key")
        digest = b"" if value.instruction is Instruction.UNSUBSCRIBE else value.value_hash
        if digest is None or (
            value.instruction is Instruction.SUBSCRIBE and len(digest) != HASH_SIZE
        ):
            raise SerdeError("a subscribe needs a 16-byte hash")
        return bytes([VERSION, value.instruction]) + digest + pk

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        _check_version(data, 2)
        try:
            instruction = Instruction(data[1])
        except ValueError:
            raise SerdeError(f"unknown subscription instruction {data[1]}") from None
        if instruction is Instruction.UNSUBSCRIBE:
            return Subscription(instruction, self._pk.decode(data[2:]), None)
        if len(data) < 2 + HASH_SIZE:
            raise SerdeError("a subscribe ends before its hash")
        digest = data[2 : 2 + HASH_SIZE]
        return Subscription(instruction, self._pk.decode(data[2 + HASH_SIZE :]), digest)


class ResponseSerde:
    """A :class:`Response`, its right value written by ``right_serde``."""

    name = "fk-response"

    def __init__(self, right_serde: Serde) -> None:
        self._right = Codec(right_serde)

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, Response) or len(value.value_hash) != HASH_SIZE:
            raise SerdeError("not a Response with a 16-byte hash")
        right = None if value.right is None else self._right.encode(value.right)
        flag = 0 if right is None else 1
        return bytes([VERSION, flag]) + value.value_hash + (right or b"")

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        _check_version(data, 2 + HASH_SIZE)
        digest = data[2 : 2 + HASH_SIZE]
        right = self._right.decode(data[2 + HASH_SIZE :]) if data[1] & 1 else None
        return Response(digest, right)


def _check_version(data: bytes, least: int) -> None:
    if len(data) < least:
        raise SerdeError(f"a foreign-key join message needs at least {least} bytes")
    if data[0] != VERSION:
        raise SerdeError(f"foreign-key join message version {data[0]}, this worker reads 0")


def subscriber_prefix(fk: bytes) -> bytes:
    """The subscription store's key prefix of every subscriber of foreign key ``fk``."""
    return _LENGTH.pack(len(fk)) + fk


def subscription_key(fk: bytes, pk: bytes) -> bytes:
    """The subscription store's key of ``pk`` subscribed to ``fk``."""
    return subscriber_prefix(fk) + pk


def subscriber(key: bytes) -> bytes:
    """The primary key's bytes of a subscription store key."""
    (length,) = _LENGTH.unpack_from(key, 0)
    return key[_LENGTH.size + length :]
