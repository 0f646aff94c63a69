"""Windowed stores as processors see them: Python keys and values, windows by their times.

``ctx.window_store(name)`` gives a :class:`WindowStoreView` (``Topology.add_window_store``),
``ctx.session_store(name)`` a :class:`SessionStoreView` (``add_session_store``). Each write
happens at the current record's timestamp (``ctx.timestamp``; in a punctuation, its
time), which advances the store's observed time and so its retention; a write to a
window already past retention is dropped and counted, as in Kafka Streams. Reads see the
task's own uncommitted writes and never return an expired window. Times of ``fetch``
reads are inclusive at both ends; ``from_ms > to_ms`` raises ``ScanRangeError``.

The byte-level stores are ``worker/state/window_stores.py``; this module only encodes and
decodes, through the contracts of ``worker/state/contracts.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from worker.errors import TopologyError
from worker.serde import Codec, Serde, SerdeError
from worker.state.contracts import RawSessionStore, RawWindowStore

_Raw = TypeVar("_Raw", RawWindowStore, RawSessionStore)


class _Codecs:
    """A view's serdes: keys never None (a window belongs to a key)."""

    __slots__ = ("name", "_keys", "_values")

    def __init__(self, name: str, key_serde: Serde, value_serde: Serde) -> None:
        self.name = name
        self._keys = Codec(key_serde, kept=True)
        self._values = Codec(value_serde, kept=True)

    def key(self, key: Any) -> bytes:
        data = self._keys.encode(key)
        if data is None:
            raise SerdeError(f"store {self.name!r}: a key cannot be None")
        return data

    def value(self, value: Any) -> bytes:
        data = self._values.encode(value)
        if data is None:
            raise SerdeError(f"store {self.name!r}: value {value!r} encodes to nothing")
        return data

    def decode_key(self, data: bytes) -> Any:
        return self._keys.decode(data)

    def decode_value(self, data: bytes) -> Any:
        return self._values.decode(data)


class _WindowedView(Generic[_Raw]):
    """What both views share: the byte-level store, the serdes, the time of a write."""

    __slots__ = ("name", "_raw", "_codecs", "_now")

    def __init__(
        self, name: str, raw: _Raw, key_serde: Serde, value_serde: Serde, now: Callable[[], int]
    ) -> None:
        """``now``: the time of a write (the task context's ``timestamp``)."""
        self.name = name
        self._raw: _Raw = raw
        self._codecs = _Codecs(name, key_serde, value_serde)
        self._now = now

    @property
    def observed_ms(self) -> int:
        """The store's observed time: the largest write time so far (-1 before any)."""
        return self._raw.observed_ms

    @property
    def raw(self) -> _Raw:
        """The byte-level store, for operators built on it (the windowed aggregations)."""
        return self._raw


class WindowStoreView(_WindowedView[RawWindowStore]):
    """Tumbling or hopping windows of one store, by key and window start."""

    __slots__ = ()

    def put(self, key: Any, window_start: int, value: Any) -> bool:
        """Write ``value`` for ``key``'s window starting at ``window_start`` (``None``
        deletes it). False when that window is past retention: the write was dropped.

        Raises:
            ValueError: ``window_start`` is not a window start of the store.
        """
        data = None if value is None else self._codecs.value(value)
        return self._raw.put_window(self._codecs.key(key), window_start, data, self._now())

    def get(self, key: Any, window_start: int) -> Any:
        """The value of ``key``'s window starting at ``window_start``, or None."""
        found = self._raw.get_window(self._codecs.key(key), window_start)
        return None if found is None else self._codecs.decode_value(found.value)

    def fetch(self, key: Any, from_ms: int, to_ms: int) -> list[tuple[int, Any]]:
        """``(window_start, value)`` of ``key``'s windows starting in ``[from_ms, to_ms]``,
        by start."""
        decode = self._codecs.decode_value
        found = self._raw.fetch_windows(self._codecs.key(key), from_ms, to_ms)
        return [(w.start_ms, decode(w.value)) for w in found]

    def fetch_all(self, from_ms: int, to_ms: int) -> list[tuple[Any, int, Any]]:
        """``(key, window_start, value)`` of every key's windows starting in
        ``[from_ms, to_ms]``, by start, then key bytes."""
        codecs = self._codecs
        return [
            (codecs.decode_key(w.key), w.start_ms, codecs.decode_value(w.value))
            for w in self._raw.fetch_all_windows(from_ms, to_ms)
        ]


class SessionStoreView(_WindowedView[RawSessionStore]):
    """Session windows ``[start, end]`` (both included) of one store, by key."""

    __slots__ = ()

    def find_sessions(
        self, key: Any, earliest_end_ms: int, latest_start_ms: int
    ) -> list[tuple[int, int, Any]]:
        """``(start, end, value)`` of ``key``'s sessions ending at or after
        ``earliest_end_ms`` and starting at or before ``latest_start_ms``, by end."""
        decode = self._codecs.decode_value
        found = self._raw.find_sessions(self._codecs.key(key), earliest_end_ms, latest_start_ms)
        return [(s.start_ms, s.end_ms, decode(s.value)) for s in found]

    def put(self, key: Any, start_ms: int, end_ms: int, value: Any) -> bool:
        """Write ``key``'s session ``[start_ms, end_ms]``. False when it is past
        retention: the write was dropped.

        Raises:
            ValueError: ``start_ms > end_ms``, or an end after the current record's time.
        """
        data = self._codecs.value(value)
        return self._raw.put_session(self._codecs.key(key), start_ms, end_ms, data, self._now())

    def remove(self, key: Any, start_ms: int, end_ms: int) -> None:
        """Delete ``key``'s session ``[start_ms, end_ms]`` (a merge absorbed it)."""
        self._raw.remove_session(self._codecs.key(key), start_ms, end_ms)

    def fetch_all(self, end_from_ms: int, end_to_ms: int) -> list[tuple[Any, int, int, Any]]:
        """``(key, start, end, value)`` of every key's sessions ending in
        ``[end_from_ms, end_to_ms]``."""
        codecs = self._codecs
        return [
            (codecs.decode_key(s.key), s.start_ms, s.end_ms, codecs.decode_value(s.value))
            for s in self._raw.fetch_all_sessions(end_from_ms, end_to_ms)
        ]


_View = TypeVar("_View", WindowStoreView, SessionStoreView)


def typed_view(found: object, name: str, kind: type[_View]) -> _View:
    """``found`` (a processor's store ``name``) as a ``kind``: ``ctx.window_store`` and
    ``ctx.session_store``.

    Raises:
        TopologyError: the store is of another kind.
    """
    if not isinstance(found, kind):
        raise TopologyError(f"store {name!r} is not a {kind.__name__}")
    return found
