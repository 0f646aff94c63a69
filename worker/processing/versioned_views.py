"""A versioned store as processors see it: Python keys and values, reads as of a time.

``ctx.versioned_store(name)`` (a store added with ``Topology.add_versioned_store``)
gives a :class:`VersionedKeyValueStore`: ``put`` and ``delete`` write a version at the
current record's timestamp (or the one given), ``get`` reads the newest value and
``get_as_of`` the value valid at a time, as Kafka Streams' ``VersionedKeyValueStore``
(KIP-889). The byte-level store is ``worker/state/versioned_store.py``, seen through its
contract (``worker.state.contracts.RawVersionedStore``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, cast

from worker.serde import Codec, Serde, SerdeError
from worker.state.contracts import RawVersionedStore


class VersionedValue(NamedTuple):
    """A value and the time from which it is valid."""

    value: Any
    valid_from_ms: int


class VersionedKeyValueStore:
    """Versions of each key (see the module doc). Keys are never None.

    ``put`` and ``delete`` return what the write did: ``"latest"`` (the key's newest
    version now), ``"history"`` (an older one, placed by its time) or ``"rejected"``
    (older than the store's history allows: dropped, as in Kafka Streams).
    """

    __slots__ = (
        "name",
        "_raw",
        "_keys",
        "_values",
        "_now",
        "_encode_key",
        "_decode_value",
        "_value_as_of",
    )

    def __init__(
        self,
        name: str,
        raw: RawVersionedStore,
        key_serde: Serde,
        value_serde: Serde,
        now: Callable[[], int],
    ) -> None:
        """``now``: the time of a write without one (the task context's ``timestamp``)."""
        self.name = name
        self._raw = raw
        self._keys = Codec(key_serde, kept=True)
        self._values = Codec(value_serde, kept=True)
        self._now = now
        self._encode_key = self._keys.fast_encode
        self._decode_value = self._values.fast_decode
        self._value_as_of = raw.value_as_of

    @property
    def raw(self) -> RawVersionedStore:
        """The byte-level store, for operators built on it (the joins)."""
        return self._raw

    @property
    def history_ms(self) -> int:
        return self._raw.history_ms

    def put(self, key: Any, value: Any, timestamp: int | None = None) -> str:
        """Write ``value`` (None: a tombstone) as ``key``'s version from ``timestamp``
        (default: the current record's)."""
        data = None if value is None else self._values.encode(value)
        at = self._now() if timestamp is None else timestamp
        return str(self._raw.put_version(self._key(key), data, at))

    def delete(self, key: Any, timestamp: int | None = None) -> str:
        """A tombstone version of ``key`` from ``timestamp`` (default: the record's)."""
        return self.put(key, None, timestamp)

    def get(self, key: Any) -> Any:
        """The newest value of ``key``, or None."""
        found = self._raw.get_latest(self._key(key))
        return None if found is None else self._values.decode(found.value)

    def get_as_of(self, key: Any, as_of_ms: int) -> Any:
        """The value of ``key`` valid at ``as_of_ms``, or None (also below the history).
        A stream-table join calls this per record: the serdes' fast paths, as the
        key-value view's ``get``, and no version built."""
        try:  # ``_key`` inline
            raw_key = self._encode_key(key) if key is not None else None
        except Exception:
            raw_key = None
        data = self._value_as_of(self._key(key) if raw_key is None else raw_key, as_of_ms)
        if data is None:
            return None
        try:
            return self._decode_value(data)
        except Exception:
            return self._values.decode(data)

    def get_version(self, key: Any, as_of_ms: int | None = None) -> VersionedValue | None:
        """The version valid at ``as_of_ms`` (default: the newest) with its start time."""
        raw_key = self._key(key)
        if as_of_ms is None:
            found = self._raw.get_latest(raw_key)
        else:
            found = self._raw.get_as_of(raw_key, as_of_ms)
        if found is None:
            return None
        return VersionedValue(self._values.decode(found.value), found.valid_from_ms)

    def _key(self, key: Any) -> bytes:
        try:
            data = self._encode_key(key) if key is not None else None
        except Exception:
            data = None
        if data is None:
            data = self._keys.encode(key)  # raises the serde's own error
        if data is None:
            raise SerdeError(f"store {self.name!r}: a key cannot be None")
        return data


class _Spec(Protocol):
    """What :func:`versioned_view` reads of a ``StoreSpec``."""

    @property
    def name(self) -> str: ...

    @property
    def key_serde(self) -> Serde: ...

    @property
    def value_serde(self) -> Serde: ...


class _Clock(Protocol):
    @property
    def timestamp(self) -> int: ...


def versioned_view(spec: _Spec, raw: object, clock: _Clock) -> VersionedKeyValueStore:
    """What processors get for a versioned store: writes at ``clock.timestamp`` (the
    task context's current record time) unless given one."""

    def now() -> int:
        return clock.timestamp

    store = cast(RawVersionedStore, raw)  # the task opened a VersionedStore from the spec
    return VersionedKeyValueStore(spec.name, store, spec.key_serde, spec.value_serde, now)
