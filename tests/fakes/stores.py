"""An in-memory stand-in for a store's byte-level interface (``worker.processing.context.RawStore``).

For tests of processing logic where RocksDB adds nothing (the example app over many
records). Writes are visible at once; there is no buffer, cache, commit or offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _nothing_cached(key: bytes, default: object) -> object:
    return default


@dataclass(frozen=True, slots=True)
class DictReadPath:
    """A :class:`DictStore`'s read path: everything is in ``buffered`` (its dict)."""

    buffered: Callable[[bytes, object], object]
    cached: Callable[[bytes, object], object]
    miss: Callable[[bytes], bytes | None]


class DictStore:
    """``RawStore`` over a dict: ``get``/``put``/``delete`` of bytes keys and values.

    ``data`` is changed in place, never replaced: the read path is bound to it.
    """

    def __init__(self, name: str = "store") -> None:
        self.name = name
        self.data: dict[bytes, bytes] = {}
        self._read_path = DictReadPath(self.data.get, _nothing_cached, self.data.get)

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def read_path(self) -> DictReadPath:
        return self._read_path

    def put(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            raise TypeError("store keys and values must be bytes")
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        if type(key) is not bytes:
            raise TypeError("store keys must be bytes")
        self.data.pop(key, None)
