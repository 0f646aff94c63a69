"""An in-memory stand-in for a store's byte-level interface (``worker.state.contracts.RawKeyValueStore``).

For tests of processing logic where RocksDB adds nothing (the example app over many
records). Writes are visible at once; there is no buffer, cache, commit or offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from worker.state.scan import KeyRange, check_limit, key_range, prefix_range


def _nothing_cached(key: bytes, default: object) -> object:
    return default


@dataclass(frozen=True, slots=True)
class DictReadPath:
    """A :class:`DictStore`'s read path: everything is in ``buffered`` (its dict)."""

    buffered: Callable[[bytes, object], object]
    cached: Callable[[bytes, object], object]
    miss: Callable[[bytes], bytes | None]


class DictStore:
    """``RawKeyValueStore`` over a dict: ``get``/``put``/``delete`` of bytes keys and values.

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

    def scan(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> ListScan:
        return self._scan(key_range(lo, hi), reverse, limit)

    def scan_prefix(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> ListScan:
        return self._scan(prefix_range(prefix), reverse, limit)

    def _scan(self, keys: KeyRange, reverse: bool, limit: int | None) -> ListScan:
        limit = check_limit(limit)
        pairs = sorted(((k, v) for k, v in self.data.items() if k in keys), reverse=reverse)
        return ListScan(pairs if limit is None else pairs[:limit])


class ListScan:
    """A scan of a :class:`DictStore`: a copy of the pairs found, closable like a real one."""

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._pairs: Iterator[tuple[bytes, bytes]] = iter(pairs)

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        return next(self._pairs)

    def close(self) -> None:
        self._pairs = iter(())
