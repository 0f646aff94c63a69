"""An in-memory stand-in for a store's byte-level interface (``worker.processing.context.RawStore``).

For tests of processing logic where RocksDB adds nothing (the example app over many
records). Writes are visible at once; there is no buffer, commit or offset.
"""

from __future__ import annotations


class DictStore:
    """``RawStore`` over a dict: ``get``/``put``/``delete`` of bytes keys and values."""

    def __init__(self, name: str = "store") -> None:
        self.name = name
        self.data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            raise TypeError("store keys and values must be bytes")
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        if type(key) is not bytes:
            raise TypeError("store keys must be bytes")
        self.data.pop(key, None)
