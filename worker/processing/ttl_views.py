"""The view of a store with a TTL: keys expire in the task's stream time.

A plain :class:`~worker.processing.store_views.KeyValueStore` reads through the store's
inline read path; a TTL store's values carry their expiry and must be filtered on every
read, so its view calls the store's time-aware methods instead (``TtlStore`` in
``worker/state/ttl_store.py``), passing the task's clock: reads and scans at
``clock.stream_time``, writes at ``min(clock.timestamp, clock.stream_time)``: the
record's time, and in a punctuator the stream time (a wall-clock punctuation's time is
not stream time, and a backfill would otherwise write keys that outlive their records).
Only TTL stores pay for this; the per-record path of the others is unchanged.
"""

from __future__ import annotations

from typing import Any, Protocol

from worker.processing.store_views import KeyValueStore
from worker.serde import Serde
from worker.state.contracts import RawScan, RawTtlStore


class TaskClock(Protocol):
    """The task's times, as the processor context has them."""

    @property
    def timestamp(self) -> int: ...

    @property
    def stream_time(self) -> int: ...


class _ScansAt:
    """The store's scans at the clock's stream time, shaped as ``RawKeyValueStore.scan``."""

    __slots__ = ("_store", "_clock")

    def __init__(self, store: RawTtlStore, clock: TaskClock) -> None:
        self._store = store
        self._clock = clock

    def scan(
        self,
        lo: bytes | None = None,
        hi: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> RawScan:
        now = self._clock.stream_time
        return self._store.scan_at(lo, hi, now, reverse=reverse, limit=limit)

    def scan_prefix(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> RawScan:
        now = self._clock.stream_time
        return self._store.scan_prefix_at(prefix, now, reverse=reverse, limit=limit)


class TtlKeyValueStore(KeyValueStore):
    """A :class:`KeyValueStore` whose keys expire (see the module doc). Raises what the
    base view raises, and ``ReservedKey`` for a ``bytes`` key starting with 0xFF."""

    __slots__ = ("_store", "_clock")

    def __init__(
        self,
        name: str,
        raw: RawTtlStore,
        key_serde: Serde,
        value_serde: Serde,
        clock: TaskClock,
    ) -> None:
        super().__init__(name, raw, key_serde, value_serde, read_only=False)
        self._store = raw
        self._clock = clock
        self._raw = _ScansAt(raw, clock)  # type: ignore[assignment]

    def get(self, key: Any) -> Any:
        data = self._store.get_at(self._raw_key(key), self._clock.stream_time)
        return None if data is None else self._values.decode(data)

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.delete(key)
            return
        data = self._values.encode(value)
        if data is None:
            self.delete(key)
            return
        clock = self._clock
        self._store.put_at(self._raw_key(key), data, min(clock.timestamp, clock.stream_time))

    def delete(self, key: Any) -> None:
        self._store.remove(self._raw_key(key))
