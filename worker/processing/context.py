"""What a processor sees: typed store views, record metadata and ``forward``.

One context object lives per task and is reused for every record (no per-record
allocation); the task points it at the record being processed before dispatching, and
the record's metadata (``topic``, ``offset``...) is read from that record only when a
processor asks for it. Processors run on the processing thread only; the context is not
thread-safe and must not be kept.

This module is the per-record path of every processor call (issue 8): store access is
one dict lookup (what a node may use is resolved once, when the graph is built), and the
built-in serdes are called as the C functions behind them (``worker.serde.Codec``), in
the store views of ``store_views.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from worker.errors import TopologyError
from worker.processing.punctuation import PunctuationKind, Schedule
from worker.processing.store_views import KeyValueStore
from worker.processing.timestamps import UNBOUNDED
from worker.processing.timestamps import check as check_timestamp
from worker.processing.versioned_views import VersionedKeyValueStore
from worker.processing.window_views import SessionStoreView, WindowStoreView, typed_view

# A punctuator as processors write it: ``fn(ctx, now_ms)``, run as its processor.
PunctuatorFn = Callable[["ProcessorContext", int], object]
# What ``ctx.schedule`` hands to while a processor's init runs (worker.processing.punctuators).
Scheduler = Callable[[int, "PunctuationKind | str", PunctuatorFn, int], Schedule]


class Record(Protocol):
    """The record being processed, as confluent-kafka's ``Message`` presents it."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def timestamp(self) -> tuple[int, int]: ...

    def headers(self) -> list[tuple[str, bytes]] | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...


_INHERIT = object()  # the context's headers are the current record's


Dispatch = Callable[[Any, Any], None]


class Node:
    """One processor or sink as the context runs it: set up once per task graph.

    ``stores`` are the views the node may use (all a processor declared; none for a
    sink), so ``ctx.store`` needs no permission check per call; ``children`` are the
    nodes ``forward`` reaches, in the order they were added; ``call(key, value)`` runs
    the node.
    """

    __slots__ = ("name", "stores", "children", "call")

    def __init__(self, name: str, stores: Mapping[str, Any]) -> None:
        self.name = name
        self.stores = dict(stores)
        self.children: tuple[Node, ...] = ()
        self.call: Dispatch = _unwired


def _unwired(key: Any, value: Any) -> None:
    raise TopologyError("node called before the task graph wired it")


class RecordSink(Protocol):
    """Where sink nodes write (the task's record collector): ``timestamp`` in ms (0: the
    producer's clock), ``headers`` a list of (str, bytes) or None."""

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None: ...


class ProcessorContext:
    """Per-task context handed to every processor call.

    These belong to the task graph, their only writer (plain attributes, not setters:
    it writes them once per record and once per node called); processors only read them:

    ``timestamp``
        The current record's timestamp in ms, as the configured extractor gave it (or
        what ``forward(timestamp=)`` set for the children it calls). In a punctuation,
        the punctuation time. Stores stamp their changelog records with it.
    ``headers`` (a property: read from the record only when asked, as ``topic`` is)
        The current record's headers: a list of (str, bytes), or None (or what
        ``forward(headers=)`` set for the children it calls). Shared with every output
        that inherits them, so never mutate it: pass ``forward(headers=)`` a new list.
    ``stream_time``
        The task's stream time: the largest timestamp it has processed (this record's
        included), -1 before the first; it never decreases, and a task resumes with the
        value of its last commit after a restart or a move.

    ``current_record``
        The record being processed, as the consumer fetched it; the metadata properties
        (``topic``, ``offset``...) read it when a processor asks. Before the first
        record, a stand-in with empty metadata.
    ``current_node``
        The node being run: :meth:`store` resolves names among its stores and
        :meth:`forward` reaches its children, pointing this slot at each child while
        the child runs.

    ``scheduler`` is set only while a processor's ``init`` runs (by the task's
    :class:`worker.processing.punctuators.TaskPunctuators`): what :meth:`schedule` calls.
    """

    __slots__ = (
        "task_id",
        "current_record",
        "current_node",
        "timestamp",
        "stream_time",
        "scheduler",
        "future",
        "_headers",
        "_nodes",
    )

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.current_record: Record = _NO_RECORD
        self.current_node = Node("", {})
        self.timestamp = -1
        self.stream_time = -1
        self.scheduler: Scheduler | None = None
        self.future = UNBOUNDED  # timestamp.max.future.ms, set by the task graph
        self._headers: Any = _INHERIT  # forward(headers=)'s, while its children run
        self._nodes: dict[str, Node] = {}

    def wire(self, nodes: Mapping[str, Node]) -> None:
        """Called once by the task graph: every node by name, children and stores set."""
        self._nodes = dict(nodes)

    def node(self, name: str) -> Node:
        """The node ``name`` of this task's graph (KeyError if there is none)."""
        return self._nodes[name]

    def schedule(
        self,
        interval_ms: int,
        kind: PunctuationKind | str,
        fn: PunctuatorFn,
        *,
        phase_ms: int = 0,
    ) -> Schedule:
        """Run ``fn(ctx, now_ms)`` every ``interval_ms`` of ``kind`` time, as this processor.

        ``kind`` is ``"stream"`` (each time stream time passes a multiple of
        ``interval_ms`` plus ``phase_ms``, counted from the epoch) or ``"wall"`` (every
        ``interval_ms`` of monotonic time). ``fn`` may use this processor's stores and
        ``forward`` to its children; its writes and outputs commit with the task's.
        Returns the :class:`Schedule`, whose ``cancel()`` stops it.

        Raises:
            TopologyError: called outside the processor's ``init`` (the schedules of a
                task are registered each time it starts running, there only).
            ValueError: a bad interval, phase or kind.
        """
        if self.scheduler is None:
            raise TopologyError(
                f"processor {self.current_node.name!r}: ctx.schedule is only valid inside"
                " the processor's init (add_processor(..., init=...))"
            )
        return self.scheduler(interval_ms, kind, fn, phase_ms)

    @property
    def topic(self) -> str:
        return self.current_record.topic() or ""

    @property
    def partition(self) -> int:
        partition = self.current_record.partition()
        return -1 if partition is None else partition

    @property
    def offset(self) -> int:
        offset = self.current_record.offset()
        return -1 if offset is None else offset

    @property
    def headers(self) -> list[tuple[str, bytes]] | None:
        headers = self._headers
        return self.current_record.headers() if headers is _INHERIT else headers

    def store(self, name: str) -> KeyValueStore:
        """The store ``name``, if the current processor declared it."""
        try:
            return self.current_node.stores[name]
        except KeyError:
            raise TopologyError(
                f"processor {self.current_node.name!r} did not declare store {name!r}"
            ) from None

    def window_store(self, name: str) -> WindowStoreView:
        """The window store ``name`` (``add_window_store``) the current processor declared."""
        return typed_view(self.store(name), name, WindowStoreView)

    def session_store(self, name: str) -> SessionStoreView:
        """The session store ``name`` (``add_session_store``) the current processor declared."""
        return typed_view(self.store(name), name, SessionStoreView)

    def versioned_store(self, name: str) -> VersionedKeyValueStore:
        """The versioned store ``name`` (``add_versioned_store``) the current processor declared."""
        found = self.store(name)
        if not isinstance(found, VersionedKeyValueStore):
            raise TopologyError(f"store {name!r} is not a VersionedKeyValueStore")
        return found

    def forward(
        self,
        key: Any,
        value: Any,
        to: str | None = None,
        *,
        timestamp: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Pass a record to the current node's children (or only to child ``to``).

        The output carries the current ``timestamp`` and ``headers`` unless given here;
        what is given is what the children (and the sinks below them) see, and the
        current values come back once they return.

        Raises:
            InvalidTimestamp: ``timestamp`` is not an int >= 0, or is more than
                ``timestamp.max.future.ms`` ahead of the wall clock.
            TopologyError: the current node has no child ``to``.
        """
        if timestamp is not None or headers is not None:
            self._forward_as(key, value, to, timestamp, headers)
            return
        node = self.current_node
        if to is None:
            for child in node.children:
                self.current_node = child
                try:
                    child.call(key, value)
                finally:
                    self.current_node = node
            return
        found = False
        for child in node.children:
            if child.name == to:
                found = True
                self.current_node = child
                try:
                    child.call(key, value)
                finally:
                    self.current_node = node
        if not found:
            raise TopologyError(f"{node.name!r} has no child {to!r}")

    def _forward_as(
        self,
        key: Any,
        value: Any,
        to: str | None,
        timestamp: int | None,
        headers: list[tuple[str, bytes]] | None,
    ) -> None:
        """``forward`` with a timestamp or headers of the output's own."""
        saved = self.timestamp, self._headers
        if timestamp is not None:
            checked = check_timestamp(timestamp)
            if not self.future.admits(checked):
                raise self.future.refusal(checked)
            self.timestamp = checked
        if headers is not None:
            self._headers = headers
        try:
            self.forward(key, value, to)
        finally:
            self.timestamp, self._headers = saved


class NoRecord:
    """The metadata before the first record: empty topic, -1 for numbers, no headers.

    Also the base of a punctuation's synthetic record (worker.processing.punctuators).
    """

    __slots__ = ()

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


_NO_RECORD: Record = NoRecord()
