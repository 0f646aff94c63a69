"""A table row's change as a re-grouped table sends it: the new value and the old one.

Kafka Streams' ``Change<V>``: a table re-grouped by another key must take a row's old
contribution out of the group it was in (the subtractor) and put the new one into its
new group (the adder). Both travel in one repartition record when the group stays the
same (KIP-904: one update, no transient wrong aggregate), in two otherwise.

On the wire (:class:`ChangeSerde`): one flag byte (bit 0: a new value, bit 1: an old one),
then the new value's length as 4 bytes big-endian and its bytes, then the old value's
bytes, each written by the inner serde.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from worker.serde import Codec, Serde, SerdeError

_NEW, _OLD = 1, 2
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Change:
    """``new``: the row's value now (None: removed); ``old``: what it contributed before
    (None: nothing)."""

    new: Any
    old: Any


class ChangeSerde:
    """Serialises a :class:`Change` with ``inner`` for both values (see the module doc)."""

    name = "change"

    def __init__(self, inner: Serde) -> None:
        self._inner = Codec(inner)

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, Change):
            raise SerdeError(f"not a Change: {type(value).__name__}")
        new = None if value.new is None else self._inner.encode(value.new)
        old = None if value.old is None else self._inner.encode(value.old)
        flags = (_NEW if new is not None else 0) | (_OLD if old is not None else 0)
        new_bytes = new or b""
        return bytes([flags]) + _LENGTH.pack(len(new_bytes)) + new_bytes + (old or b"")

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < 1 + _LENGTH.size:
            raise SerdeError(f"a change needs at least 5 bytes, got {len(data)}")
        flags = data[0]
        (length,) = _LENGTH.unpack_from(data, 1)
        start = 1 + _LENGTH.size
        if start + length > len(data):
            raise SerdeError("a change's new value runs past its end")
        new = self._inner.decode(data[start : start + length]) if flags & _NEW else None
        old = self._inner.decode(data[start + length :]) if flags & _OLD else None
        return Change(new, old)
