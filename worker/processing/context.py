"""What a processor sees: typed store views, record metadata and ``forward``.

One context object lives per task and is reused for every record (no per-record
allocation); the task sets the record metadata before dispatching. Processors run on
the processing thread only; the context is not thread-safe and must not be kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from worker.errors import TopologyError
from worker.serde import Serde, SerdeError


class RawStore(Protocol):
    """The byte-level store a view wraps (worker.state.store.Store satisfies it)."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...


class KeyValueStore:
    """A store as processors use it: Python keys and values through the store's serdes.

    Reads see this task's uncommitted writes; the writes reach RocksDB and the changelog
    together at the next commit.
    """

    __slots__ = ("name", "_raw", "_kser", "_vser", "_read_only")

    def __init__(
        self, name: str, raw: RawStore, key_serde: Serde, value_serde: Serde, read_only: bool
    ) -> None:
        self.name = name
        self._raw = raw
        self._kser = key_serde
        self._vser = value_serde
        self._read_only = read_only

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None. Raises SerdeError for a key that encodes to nothing."""
        data = self._raw.get(self._key(key))
        return None if data is None else self._vser.deserialize(data)

    def put(self, key: Any, value: Any) -> None:
        """Write ``value`` for ``key``; ``None`` deletes it."""
        if value is None:
            self.delete(key)
            return
        self._check_writable()
        self._raw.put(self._key(key), self._vser.serialize(value))  # type: ignore[arg-type]

    def delete(self, key: Any) -> None:
        self._check_writable()
        self._raw.delete(self._key(key))

    def _key(self, key: Any) -> bytes:
        data = self._kser.serialize(key)
        if data is None:  # a None key (a null-key record): no store can hold it
            raise SerdeError(f"store {self.name!r}: a key cannot be None")
        return data

    def _check_writable(self) -> None:
        if self._read_only:
            raise TopologyError(f"store {self.name!r} is a table: only its topic writes it")


Dispatch = Callable[[Any, Any], None]


class ProcessorContext:
    """Per-task context handed to every processor call."""

    __slots__ = (
        "task_id",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "headers",
        "_stores",
        "_allowed",
        "_children",
        "_current",
    )

    def __init__(self, task_id: str, stores: Mapping[str, KeyValueStore]) -> None:
        self.task_id = task_id
        self.topic = ""
        self.partition = -1
        self.offset = -1
        self.timestamp = -1
        self.headers: list[tuple[str, bytes]] | None = None
        self._stores = dict(stores)
        self._allowed: dict[str, frozenset[str]] = {}
        self._children: dict[str, tuple[tuple[str, Dispatch], ...]] = {}
        self._current = ""

    def wire(
        self,
        allowed_stores: Mapping[str, frozenset[str]],
        children: Mapping[str, tuple[tuple[str, Dispatch], ...]],
    ) -> None:
        """Called once by the task graph: which stores each node may use, and its children."""
        self._allowed = dict(allowed_stores)
        self._children = dict(children)

    def store(self, name: str) -> KeyValueStore:
        """The store ``name``, if the current processor declared it."""
        if name not in self._allowed.get(self._current, frozenset()):
            raise TopologyError(f"processor {self._current!r} did not declare store {name!r}")
        return self._stores[name]

    def forward(self, key: Any, value: Any, to: str | None = None) -> None:
        """Pass a record to the current node's children (or only to child ``to``)."""
        current = self._current
        found = False
        for child_name, dispatch in self._children.get(current, ()):
            if to is None or child_name == to:
                found = True
                self._current = child_name
                try:
                    dispatch(key, value)
                finally:
                    self._current = current
        if to is not None and not found:
            raise TopologyError(f"{current!r} has no child {to!r}")

    def enter(self, node: str) -> None:
        """Make ``node`` the current node (used by the task graph when a record arrives)."""
        self._current = node
