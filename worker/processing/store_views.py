"""Stores as processors see them: Python keys and values through the store's serdes.

A view wraps the byte-level store of its task (the contract
``worker.state.contracts.RawKeyValueStore``, which ``worker.state.store.Store`` satisfies) and runs on the processing thread only. This
module is on the per-record path of every store access (issues 8 and 14): see
:class:`KeyValueStore` for what is inlined there and why.
"""

from __future__ import annotations

from typing import Any

from worker.errors import TopologyError
from worker.processing.view_scans import ViewScan, prefix_bytes
from worker.serde import Codec, Serde, SerdeError
from worker.state.contracts import RawKeyValueStore

_MISSING = object()


class KeyValueStore:
    """A store as processors use it: Python keys and values through the store's serdes.

    Reads see this task's uncommitted writes; the writes reach RocksDB and the changelog
    together at the next commit.

    Keys are encoded by :meth:`_raw_key` alone, values by the value :class:`Codec`.
    ``get`` and ``put`` run every store access of every record, and a Python call per
    access was a measurable part of the per-record cost (issues 8 and 14), so they inline
    the common case: the C function for a value other than None, the store's
    :class:`~worker.state.contracts.ReadPath`. Anything else (a None key, a C function that raised or gave None)
    goes to ``_raw_key`` or the codec, so the rule itself is written once;
    tests/property/test_store_views.py holds both paths to what the serdes say.
    """

    __slots__ = (
        "name",
        "_read_only",
        "_keys",
        "_values",
        "_encode_key",
        "_encode_value",
        "_decode_value",
        "_buffered",
        "_cached",
        "_miss",
        "_raw_put",
        "_raw_delete",
        "_raw",
    )

    def __init__(
        self,
        name: str,
        raw: RawKeyValueStore,
        key_serde: Serde,
        value_serde: Serde,
        read_only: bool,
    ) -> None:
        self.name = name
        self._read_only = read_only
        self._keys = Codec(key_serde, kept=True)
        self._values = Codec(value_serde, kept=True)
        self._encode_key = self._keys.fast_encode
        self._encode_value = self._values.fast_encode
        self._decode_value = self._values.fast_decode
        read_path = raw.read_path()
        self._buffered, self._cached, self._miss = (
            read_path.buffered,
            read_path.cached,
            read_path.miss,
        )
        self._raw_put = raw.put
        self._raw_delete = raw.delete
        self._raw = raw

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None. Raises SerdeError for a key that encodes to nothing."""
        try:
            raw_key = self._encode_key(key) if key is not None else None
        except Exception:
            raw_key = None
        if raw_key is None:
            raw_key = self._raw_key(key)
        data: Any = self._buffered(raw_key, _MISSING)
        if data is _MISSING:
            data = self._cached(raw_key, _MISSING)
            if data is _MISSING:
                data = self._miss(raw_key)
        if data is None:
            return None
        try:
            return self._decode_value(data)
        except Exception:
            return self._values.decode(data)

    def put(self, key: Any, value: Any) -> None:
        """Write ``value`` for ``key``; ``None`` deletes it."""
        if value is None:
            self.delete(key)
            return
        if self._read_only:
            self._check_writable()
        try:
            raw_key = self._encode_key(key) if key is not None else None
        except Exception:
            raw_key = None
        if raw_key is None:
            raw_key = self._raw_key(key)
        try:
            data = self._encode_value(value)
        except Exception:
            data = self._values.encode(value)
        self._raw_put(raw_key, data)

    def delete(self, key: Any) -> None:
        self._check_writable()
        self._raw_delete(self._raw_key(key))

    def range(
        self,
        from_key: Any = None,
        to_key: Any = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> ViewScan:
        """The pairs with ``from_key <= key < to_key`` (None: that end open), in the
        keys' serialised byte order, this task's uncommitted writes included; at most
        ``limit`` of them; top down with ``reverse``. A context manager (see ViewScan).

        Raises:
            ScanRangeError: ``from_key`` is after ``to_key``, or ``limit`` is not an int
                >= 0 (nothing was read).
        """
        lo = None if from_key is None else self._raw_key(from_key)
        hi = None if to_key is None else self._raw_key(to_key)
        raw = self._raw.scan(lo, hi, reverse=reverse, limit=limit)
        return ViewScan(raw, self._keys, self._values)

    def prefix(self, prefix: Any, *, reverse: bool = False, limit: int | None = None) -> ViewScan:
        """The pairs whose serialised key starts with ``prefix``'s (``view_scans.py``),
        as :meth:`range`."""
        raw = self._raw.scan_prefix(prefix_bytes(self._keys, prefix), reverse=reverse, limit=limit)
        return ViewScan(raw, self._keys, self._values)

    def _raw_key(self, key: Any) -> bytes:
        """``key`` as the store holds it: the key codec's result, never None (a record
        with a null key usually has none to store under)."""
        data = self._keys.encode(key)
        if data is None:
            raise SerdeError(f"store {self.name!r}: a key cannot be None")
        return data

    def _check_writable(self) -> None:
        if self._read_only:
            raise TopologyError(f"store {self.name!r} is a table: only its topic writes it")
