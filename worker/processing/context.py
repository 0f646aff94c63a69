"""What a processor sees: typed store views, record metadata and ``forward``.

One context object lives per task and is reused for every record (no per-record
allocation); the task points it at the record being processed before dispatching, and
the record's metadata (``topic``, ``offset``...) is read from that record only when a
processor asks for it. Processors run on the processing thread only; the context is not
thread-safe and must not be kept.

This module is the per-record path of every processor call (issue 8): store access is
one dict lookup (what a node may use is resolved once, when the graph is built), and the
built-in serdes are called as the C functions behind them (``worker.serde.fast_*``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol

from worker.errors import TopologyError
from worker.serde import Serde, SerdeError, fast_deserializer, fast_serializer


class RawStore(Protocol):
    """The byte-level store a view wraps (worker.state.store.Store satisfies it)."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...


class Record(Protocol):
    """The record being processed, as confluent-kafka's ``Message`` presents it."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def timestamp(self) -> tuple[int, int]: ...

    def headers(self) -> list[tuple[str, bytes]] | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...


_MISSING = object()


def _no_lookup(key: bytes, default: object) -> object:
    """A raw store without a read path (a test's): every read goes to its ``get``."""
    return default


class KeyValueStore:
    """A store as processors use it: Python keys and values through the store's serdes.

    Reads see this task's uncommitted writes; the writes reach RocksDB and the changelog
    together at the next commit.
    """

    __slots__ = (
        "name",
        "_raw",
        "_kser",
        "_vser",
        "_read_only",
        "_encode_key",
        "_encode_value",
        "_decode_value",
        "_buffered",
        "_cached",
        "_miss",
        "_raw_put",
        "_raw_delete",
    )

    def __init__(
        self, name: str, raw: RawStore, key_serde: Serde, value_serde: Serde, read_only: bool
    ) -> None:
        self.name = name
        self._raw = raw
        self._kser = key_serde
        self._vser = value_serde
        self._read_only = read_only
        self._encode_key = fast_serializer(key_serde, kept=True)
        self._encode_value = fast_serializer(value_serde, kept=True)
        self._decode_value = fast_deserializer(value_serde)
        read_path = getattr(raw, "read_path", None)  # a Store's; see its read_path
        if read_path is None:
            self._buffered, self._cached, self._miss = _no_lookup, _no_lookup, raw.get
        else:
            self._buffered, self._cached, self._miss = read_path()
        self._raw_put = raw.put
        self._raw_delete = raw.delete

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None. Raises SerdeError for a key that encodes to nothing."""
        # The key's encoding and the store's lookups are written out here (and the encoding
        # in put), not called: a Python call per store access was a measurable part of the
        # per-record cost.
        raw_key: Any
        if key is None:
            raw_key = self._key_of_none()
        else:
            try:
                raw_key = self._encode_key(key)
            except Exception:
                raw_key = self._kser.serialize(key)
            if raw_key is None:
                self._no_key()
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
            return self._vser.deserialize(data)  # the serde's own error, or its result

    def put(self, key: Any, value: Any) -> None:
        """Write ``value`` for ``key``; ``None`` deletes it."""
        if value is None:
            self.delete(key)
            return
        if self._read_only:
            self._check_writable()
        raw_key: Any
        if key is None:
            raw_key = self._key_of_none()
        else:
            try:
                raw_key = self._encode_key(key)
            except Exception:
                raw_key = self._kser.serialize(key)
            if raw_key is None:
                self._no_key()
        try:
            data = self._encode_value(value)
        except Exception:
            data = self._vser.serialize(value)
        self._raw_put(raw_key, data)

    def delete(self, key: Any) -> None:
        self._check_writable()
        self._raw_delete(self._key(key))

    def _key(self, key: Any) -> bytes:
        if key is None:
            return self._key_of_none()
        try:
            data = self._encode_key(key)
        except Exception:
            data = self._kser.serialize(key)
        if data is None:
            self._no_key()
        return data  # type: ignore[no-any-return]

    def _key_of_none(self) -> bytes:
        """A None key (a null-key record) as the key serde encodes it; usually nothing."""
        data = self._kser.serialize(None)
        if data is None:
            self._no_key()
        return data  # type: ignore[return-value]

    def _no_key(self) -> NoReturn:
        raise SerdeError(f"store {self.name!r}: a key cannot be None")

    def _check_writable(self) -> None:
        if self._read_only:
            raise TopologyError(f"store {self.name!r} is a table: only its topic writes it")


Dispatch = Callable[[Any, Any], None]


class Node:
    """One processor or sink as the context runs it: set up once per task graph.

    ``stores`` are the views the node may use (all a processor declared; none for a
    sink), so ``ctx.store`` needs no permission check per call; ``children`` are the
    nodes ``forward`` reaches, in the order they were added; ``call(key, value)`` runs
    the node.
    """

    __slots__ = ("name", "stores", "children", "call")

    def __init__(self, name: str, stores: Mapping[str, KeyValueStore]) -> None:
        self.name = name
        self.stores = dict(stores)
        self.children: tuple[Node, ...] = ()
        self.call: Dispatch = _unwired


def _unwired(key: Any, value: Any) -> None:
    raise TopologyError("node called before the task graph wired it")


class RecordSink(Protocol):
    """Where sink nodes write (the task's record collector)."""

    def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None
    ) -> None: ...


class ProcessorContext:
    """Per-task context handed to every processor call."""

    __slots__ = ("task_id", "_record", "_nodes", "_node")

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self._record: Record = _NO_RECORD
        self._nodes: dict[str, Node] = {}
        self._node = Node("", {})

    def wire(self, nodes: Mapping[str, Node]) -> None:
        """Called once by the task graph: every node by name, children and stores set."""
        self._nodes = dict(nodes)

    @property
    def topic(self) -> str:
        return self._record.topic() or ""

    @property
    def partition(self) -> int:
        partition = self._record.partition()
        return -1 if partition is None else partition

    @property
    def offset(self) -> int:
        offset = self._record.offset()
        return -1 if offset is None else offset

    @property
    def timestamp(self) -> int:
        return self._record.timestamp()[1]

    @property
    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._record.headers()

    def store(self, name: str) -> KeyValueStore:
        """The store ``name``, if the current processor declared it."""
        try:
            return self._node.stores[name]
        except KeyError:
            raise TopologyError(
                f"processor {self._node.name!r} did not declare store {name!r}"
            ) from None

    def forward(self, key: Any, value: Any, to: str | None = None) -> None:
        """Pass a record to the current node's children (or only to child ``to``)."""
        node = self._node
        if to is None:
            for child in node.children:
                self._node = child
                try:
                    child.call(key, value)
                finally:
                    self._node = node
            return
        found = False
        for child in node.children:
            if child.name == to:
                found = True
                self._node = child
                try:
                    child.call(key, value)
                finally:
                    self._node = node
        if not found:
            raise TopologyError(f"{node.name!r} has no child {to!r}")


class _NoRecord:
    """The metadata before the first record: empty topic, -1 for numbers, no headers."""

    def topic(self) -> str | None:
        return ""

    def partition(self) -> int | None:
        return -1

    def offset(self) -> int | None:
        return -1

    def timestamp(self) -> tuple[int, int]:
        return (0, -1)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return None


_NO_RECORD: Record = _NoRecord()
