"""Range and prefix scans as processors see them: Python keys and values, in key order.

The store (``worker.state.store.Store.scan``) merges the task's uncommitted writes with
RocksDB and yields bytes in the keys' serialised byte order; a :class:`ViewScan` decodes
each pair with the store's serdes. Which order that is per serde: ``docs/time.md``.

A prefix is a key prefix in serialised form: the serde encodes it, and for ``json`` a
``str`` prefix loses its closing quote, so ``prefix("acct-")`` matches every JSON string
key starting with ``acct-`` (``"acct-1"``, ``"acct-22"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.closing import Closing
from worker.serde import Codec, SerdeError
from worker.state.contracts import RawScan


class ViewScan(Closing):
    """An iterator of ``(key, value)`` Python objects over a store's scan.

    Use it in a ``with`` block or exhaust it: until closed it holds a RocksDB iterator
    (the task's next commit closes it anyway, and a closed scan yields nothing more).
    Close is idempotent. Owner thread only, like the view it came from.
    """

    __slots__ = ("_raw", "_decode_key", "_decode_value")

    def __init__(self, raw: RawScan, keys: Codec, values: Codec) -> None:
        self._raw = raw
        self._decode_key: Callable[[bytes], Any] = keys.decode
        self._decode_value: Callable[[bytes], Any] = values.decode

    def __iter__(self) -> ViewScan:
        return self

    def __next__(self) -> tuple[Any, Any]:
        key, value = next(self._raw)
        return self._decode_key(key), self._decode_value(value)

    def close(self) -> None:
        """Release the store's iterator now. Idempotent."""
        self._raw.close()


def prefix_bytes(keys: Codec, prefix: Any) -> bytes:
    """``prefix`` as the serialised prefix of the keys it should match (see the module doc).

    Raises:
        SerdeError: the key serde cannot encode it (None included).
    """
    data = keys.encode(prefix) if prefix is not None else None
    if data is None:
        raise SerdeError("a scan prefix cannot be None (use range() for every key)")
    if getattr(keys.serde, "name", None) == "json" and isinstance(prefix, str):
        return data[:-1]  # '"abc"' -> '"abc': strings that start with abc
    return data
