"""Windowed output keys: the record's key with the bounds of its window, and their serde.

Windowed aggregations forward ``Windowed(key, start_ms, end_ms)`` keys. On the wire::

    inner_key_bytes || start_be8 || end_be8

``be8`` is 8 bytes big-endian unsigned, so the last 16 bytes are always the window and
everything before them is the key as its own serde wrote it. Unlike Kafka Streams'
``TimeWindowedSerde`` (key and start only, KIP-659), the end is written too, so a reader
needs neither the window size nor the window kind to decode: fixed windows end
exclusive, sliding and session windows inclusive, as the producing aggregation defines.

Records with equal keys share a prefix but not the whole key bytes, so a sink hashing the
full bytes spreads one key's windows over partitions; partition windowed output by the
inner key when a downstream consumer needs a key's windows together (Kafka Streams'
``WindowedStreamPartitioner`` does).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from worker.serde import Serde, SerdeError, fast_serializer

K = TypeVar("K")
_BOUNDS = struct.Struct(">QQ")
_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """A key and its window ``[start_ms, end_ms)`` (fixed) or ``[start_ms, end_ms]``
    (sliding, session)."""

    key: K
    start_ms: int
    end_ms: int


class WindowedSerde:
    """``Windowed`` keys over ``inner``, the serde of the plain key.

    ``None`` is no key, as for every serde. A key whose serde gives None (the inner
    serde's null) cannot be windowed and raises :class:`SerdeError`.
    """

    def __init__(self, inner: Serde) -> None:
        self.inner = inner
        self.name = f"windowed({inner.name})"
        self._inner_encode = fast_serializer(inner)

    def serialize(self, value: Any) -> bytes | None:
        if type(value) is Windowed:  # the per-record case, checked as the slow path does
            start, end = value.start_ms, value.end_ms
            if type(start) is int and type(end) is int and 0 <= start <= end <= _MAX:
                try:
                    key = self._inner_encode(value.key)
                except Exception:
                    key = None
                if key is not None and value.key is not None:
                    return key + _BOUNDS.pack(start, end)
        return self._serialize(value)

    def _serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, Windowed):
            raise SerdeError(f"{self.name} serde needs a Windowed key, got {type(value).__name__}")
        start, end = value.start_ms, value.end_ms
        if type(start) is not int or type(end) is not int or not 0 <= start <= end <= _MAX:
            raise SerdeError(
                f"window bounds must be ints with 0 <= start <= end, got {start}, {end}"
            )
        key = self.inner.serialize(value.key)
        if key is None:
            raise SerdeError(f"{self.name}: the key {value.key!r} serialises to no bytes")
        return key + _BOUNDS.pack(start, end)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < _BOUNDS.size:
            raise SerdeError(f"{self.name}: {len(data)} bytes, fewer than the 16 of a window")
        split = len(data) - _BOUNDS.size
        start, end = _BOUNDS.unpack_from(data, split)
        return Windowed(self.inner.deserialize(data[:split]), start, end)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WindowedSerde) and other.inner is self.inner

    def __hash__(self) -> int:
        return hash((WindowedSerde, id(self.inner)))
