"""The topology users build: sources, tables, stores, processors and sinks.

It follows Kafka Streams' Processor API. A processor is a plain callable
``fn(ctx, key, value)``; it reads and writes stores through ``ctx.store(name)`` and passes
records on with ``ctx.forward``. ``build()`` splits the graph into sub-topologies (the
connected components, where sharing a store also connects nodes); each sub-topology runs
as one task per partition of its (co-partitioned) source topics, named
``<subtopology>_<partition>``.

A *table* is a store backed by a compacted topic that is both its source and its
changelog: records on the topic upsert (or, with a null value, delete) the store, and
no separate changelog is written. Spark batch jobs load tables by writing that topic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.errors import TopologyError
from worker.processing.components import Components
from worker.processing.join_windows import JoinWindows
from worker.processing.windows import (
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Windows,
    hopping,
    session,
)
from worker.serde import BYTES, Serde

if TYPE_CHECKING:
    from worker.processing.context import ProcessorContext

ProcessorFn = Callable[["ProcessorContext", Any, Any], None]
# Runs when a task starts running the processor; may ctx.schedule punctuators.
InitFn = Callable[["ProcessorContext"], object]


@dataclass(frozen=True, slots=True)
class SourceNode:
    name: str
    topic: str
    key_serde: Serde
    value_serde: Serde
    table_store: str | None = None  # set for tables: the store this topic upserts
    # an internal topic sized as the other topics of the sub-topology reading it, not as
    # its writer's (the foreign-key join's: see worker.kafka.topics.repartitions_of)
    partitioned_as_reader: bool = False


@dataclass(frozen=True, slots=True)
class ProcessorNode:
    name: str
    fn: ProcessorFn
    parents: tuple[str, ...]
    stores: tuple[str, ...]
    init: InitFn | None = None


@dataclass(frozen=True, slots=True)
class SinkNode:
    name: str
    topic: str
    parents: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """A key-value store. ``changelog_topic`` is None until the application id is known."""

    name: str
    key_serde: Serde
    value_serde: Serde
    source_topic: str | None = None  # tables: the topic that is source and changelog
    ttl_ms: int | None = None  # keys expire this long after their write (stream time)
    # windowed stores (add_window_store, add_session_store; sliding windows live in a
    # session-shaped store, for windowed aggregations; join windows: a stream-stream
    # join's buffer, add_join_buffer_store): their windows and retention
    windows: TimeWindows | SlidingWindows | SessionWindows | JoinWindows | None = None
    # emit-final aggregations: expiry waits until a window's final result is out
    hold_until_emitted: bool = False
    # versioned stores (add_versioned_store): how far back reads as of a time reach
    history_ms: int | None = None

    @property
    def is_table(self) -> bool:
        return self.source_topic is not None

    @property
    def is_windowed(self) -> bool:
        return self.windows is not None

    def changelog(self, application_id: str) -> str:
        """The topic holding this store's history: ``<app>-<store>-changelog`` or the table topic."""
        return self.source_topic or f"{application_id}-{self.name}-changelog"


@dataclass(frozen=True)
class Subtopology:
    """One connected part of the graph; runs as one task per partition."""

    id: int
    sources: tuple[SourceNode, ...]
    processors: tuple[ProcessorNode, ...]
    sinks: tuple[SinkNode, ...]
    stores: tuple[StoreSpec, ...]
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # the global tables its processors read (every instance holds them whole)
    global_stores: tuple[StoreSpec, ...] = ()

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(s.topic for s in self.sources)

    def changelog_topics(self, application_id: str) -> dict[str, str]:
        """store name -> changelog topic."""
        return {s.name: s.changelog(application_id) for s in self.stores}


@dataclass(frozen=True)
class BuiltTopology:
    subtopologies: tuple[Subtopology, ...]
    global_tables: tuple[StoreSpec, ...] = ()

    def source_topics_by_subtopology(self) -> dict[int, tuple[str, ...]]:
        return {st.id: st.source_topics for st in self.subtopologies}

    def changelog_topics_by_subtopology(self, application_id: str) -> dict[int, tuple[str, ...]]:
        """subtopology -> the changelog topics of its stores (tables: their source topic)."""
        return {
            st.id: tuple(spec.changelog(application_id) for spec in st.stores)
            for st in self.subtopologies
        }

    def sink_topics(self) -> set[str]:
        return {sink.topic for st in self.subtopologies for sink in st.sinks}

    def store(self, name: str) -> tuple[Subtopology, StoreSpec]:
        for st in self.subtopologies:
            for spec in st.stores:
                if spec.name == name:
                    return st, spec
        raise KeyError(name)


class Topology:
    """Builder for a processing graph. Names are unique across every node and store."""

    def __init__(self) -> None:
        self._sources: dict[str, SourceNode] = {}
        self._processors: dict[str, ProcessorNode] = {}
        self._sinks: dict[str, SinkNode] = {}
        self._stores: dict[str, StoreSpec] = {}
        self._globals: dict[str, StoreSpec] = {}
        self._order: list[str] = []

    def _claim(self, name: str) -> None:
        if not name or name in self._order or name in self._stores or name in self._globals:
            raise TopologyError(f"name {name!r} is empty or already used")
        self._order.append(name)

    def add_source(
        self,
        name: str,
        topic: str,
        key_serde: Serde = BYTES,
        value_serde: Serde = BYTES,
        *,
        partitioned_as_reader: bool = False,
    ) -> Topology:
        """A stream of records from ``topic``; its children see every record.

        ``partitioned_as_reader``: ``topic`` is an internal topic that must have the
        partition count of the other topics this source's sub-topology reads (it is
        co-partitioned with the table held there), whatever its writer reads."""
        self._check_topic_unused(topic)
        self._claim(name)
        self._sources[name] = SourceNode(
            name, topic, key_serde, value_serde, partitioned_as_reader=partitioned_as_reader
        )
        return self

    def add_table(
        self, name: str, topic: str, key_serde: Serde = BYTES, value_serde: Serde = BYTES
    ) -> Topology:
        """A table: store ``name`` kept equal to the latest value per key on ``topic``.

        The topic should be compacted; it is also the store's changelog. Processors that
        list ``name`` in their stores may read it; only the topic writes it.
        """
        self._check_topic_unused(topic)
        self._claim(name)
        self._stores[name] = StoreSpec(name, key_serde, value_serde, source_topic=topic)
        self._sources[name] = SourceNode(name, topic, key_serde, value_serde, table_store=name)
        return self

    def add_global_table(
        self, name: str, topic: str, key_serde: Serde = BYTES, value_serde: Serde = BYTES
    ) -> Topology:
        """A global table: store ``name`` holding every partition of ``topic`` on every
        instance (``worker/runtime/global_tables.py``), current before any task runs and
        kept current between batches. Processors that list ``name`` read it (any key: no
        co-partitioning); only the topic writes it, and it is the table's changelog.

        Raises:
            TopologyError: the name is empty or taken, the topic already read.
        """
        self._check_topic_unused(topic)
        if not name or name in self._stores or name in self._order or name in self._globals:
            raise TopologyError(f"name {name!r} is empty or already used")
        self._globals[name] = StoreSpec(name, key_serde, value_serde, source_topic=topic)
        return self

    def add_store(
        self,
        name: str,
        key_serde: Serde = BYTES,
        value_serde: Serde = BYTES,
        *,
        ttl_ms: int | None = None,
    ) -> Topology:
        """A key-value store with its own changelog topic, for processors that list it.

        ``ttl_ms``: each key expires that long after its last write, in stream time
        (``docs/time.md``, Per-key TTL); expired keys read as absent and are deleted, with
        a changelog tombstone, by a sweep at each commit.
        """
        if not name or name in self._stores or name in self._order:
            raise TopologyError(f"name {name!r} is empty or already used")
        if ttl_ms is not None and (type(ttl_ms) is not int or ttl_ms < 1):
            raise TopologyError(f"store {name!r}: ttl_ms must be an int >= 1 (ms), got {ttl_ms!r}")
        self._stores[name] = StoreSpec(name, key_serde, value_serde, ttl_ms=ttl_ms)
        return self

    def add_versioned_store(
        self,
        name: str,
        history_ms: int,
        *,
        key_serde: Serde = BYTES,
        value_serde: Serde = BYTES,
    ) -> Topology:
        """A versioned key-value store (``worker/state/versioned_store.py``) with its own
        compacted changelog, for processors that list it; they get it with
        ``ctx.versioned_store(name)``: values by key and time, read as of a timestamp
        (stream-table joins as of the record's time), ``history_ms`` back from the largest
        time written, writes older than that rejected.

        Raises:
            TopologyError: a bad ``history_ms``, or the name is empty or taken.
        """
        if not name or name in self._stores or name in self._order:
            raise TopologyError(f"name {name!r} is empty or already used")
        if type(history_ms) is not int or history_ms < 0:
            raise TopologyError(
                f"store {name!r}: history_ms must be an int >= 0 (ms), got {history_ms!r}"
            )
        self._stores[name] = StoreSpec(name, key_serde, value_serde, history_ms=history_ms)
        return self

    def add_window_store(
        self,
        name: str,
        size_ms: int,
        *,
        advance_ms: int | None = None,
        grace_ms: int,
        retention_ms: int | None = None,
        key_serde: Serde,
        value_serde: Serde,
    ) -> Topology:
        """A store of tumbling (``advance_ms`` None) or hopping windows, with its own
        changelog (``compact,delete``, time-retained), for processors that list it; they
        get it with ``ctx.window_store(name)`` (``window_views.WindowStoreView``).

        Raises:
            InvalidWindow: as :func:`~worker.processing.windows.hopping`, naming the key.
            TopologyError: the name is empty or taken.
        """
        advance = size_ms if advance_ms is None else advance_ms
        windows = hopping(size_ms, advance, grace_ms=grace_ms, retention_ms=retention_ms)
        return self._add_windowed(name, windows, key_serde, value_serde)

    def add_session_store(
        self,
        name: str,
        gap_ms: int,
        *,
        grace_ms: int,
        retention_ms: int | None = None,
        key_serde: Serde,
        value_serde: Serde,
    ) -> Topology:
        """A store of session windows, as :meth:`add_window_store`; processors get it with
        ``ctx.session_store(name)`` (``window_views.SessionStoreView``).

        Raises:
            InvalidWindow: as :func:`~worker.processing.windows.session`, naming the key.
            TopologyError: the name is empty or taken.
        """
        windows = session(gap_ms, grace_ms=grace_ms, retention_ms=retention_ms)
        return self._add_windowed(name, windows, key_serde, value_serde)

    def add_join_buffer_store(
        self, name: str, windows: JoinWindows, *, key_serde: Serde, value_serde: Serde
    ) -> Topology:
        """One side's buffer of a stream-stream join (``worker/state/join_buffer.py``):
        records by key and time, ``windows.retention_ms`` of them, with a ``compact,delete``
        changelog like every windowed store's; processors get a ``JoinBufferView``.

        Raises:
            TopologyError: the name is empty or taken.
        """
        return self._add_windowed(name, windows, key_serde, value_serde)

    def _add_windowed(
        self,
        name: str,
        windows: TimeWindows | SessionWindows | JoinWindows,
        key_serde: Serde,
        value_serde: Serde,
    ) -> Topology:
        if not name or name in self._stores or name in self._order:
            raise TopologyError(f"name {name!r} is empty or already used")
        self._stores[name] = StoreSpec(name, key_serde, value_serde, windows=windows)
        return self

    def add_windowed_aggregation(
        self,
        name: str,
        parents: Sequence[str],
        windows: Windows,
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any] | None = None,
        emit: str,
        key_serde: Serde,
        value_serde: Serde,
    ) -> Topology:
        """Aggregate the records of ``parents`` per key and window (docs/windows.md §2):
        ``aggregator(key, value, aggregate)`` folds a record into a window's aggregate,
        which starts as ``initializer()``; sessions merge with ``merger(key, a, b)``.
        Children receive ``Windowed(key, start_ms, end_ms)`` keys and aggregates: on every
        update (``emit="update"``) or once per window when it closes (``"final"``).
        Creates the processor ``name`` and its windowed store ``name`` (serdes of the
        input key and of the aggregate).

        Raises:
            TopologyError: a bad emit mode, a function that is not callable, a merger
                missing for sessions or given for other windows, a taken name.
        """
        # Imported here: the operators import the processing package, whose __init__
        # imports this module, so `import worker.operators` first (an app of joins) was a
        # circular import at the module level.
        from worker.operators import windowed_aggregation

        operator = windowed_aggregation(
            name, windows, initializer, aggregator, merger, emit, key_serde, value_serde
        )
        self._check_parents(name, parents)
        if not name or name in self._stores:
            raise TopologyError(f"name {name!r} is empty or already used")
        self._claim(name)
        self._stores[name] = StoreSpec(
            name, key_serde, value_serde, windows=windows, hold_until_emitted=operator.final
        )
        init = operator.init if operator.final else None
        self._processors[name] = ProcessorNode(
            name, operator.process, tuple(parents), (name,), init
        )
        return self

    def add_processor(
        self,
        name: str,
        fn: ProcessorFn,
        parents: Sequence[str],
        stores: Sequence[str] = (),
        *,
        init: InitFn | None = None,
    ) -> Topology:
        """``fn(ctx, key, value)`` runs for every record its parents forward.

        ``init(ctx)`` runs each time a task starts running this processor as an active
        task (after its restore, a recycle from standby or a revival), with the processor
        as the current node: the place to ``ctx.schedule`` its punctuators.
        """
        if not callable(fn):
            raise TopologyError(f"processor {name!r}: fn is not callable")
        if init is not None and not callable(init):
            raise TopologyError(f"processor {name!r}: init is not callable")
        self._check_parents(name, parents)
        for store in stores:
            if store not in self._stores and store not in self._globals:
                raise TopologyError(f"processor {name!r} uses unknown store {store!r}")
        self._claim(name)
        self._processors[name] = ProcessorNode(name, fn, tuple(parents), tuple(stores), init)
        return self

    def add_sink(
        self,
        name: str,
        topic: str,
        parents: Sequence[str],
        key_serde: Serde = BYTES,
        value_serde: Serde = BYTES,
    ) -> Topology:
        """Records forwarded to this node are written to ``topic``, partitioned by murmur2(key)."""
        self._check_parents(name, parents)
        self._claim(name)
        self._sinks[name] = SinkNode(name, topic, tuple(parents), key_serde, value_serde)
        return self

    def _check_topic_unused(self, topic: str) -> None:
        read = [s.topic for s in self._sources.values()]
        if topic in read or any(g.source_topic == topic for g in self._globals.values()):
            raise TopologyError(f"topic {topic!r} is already a source")

    def _check_parents(self, name: str, parents: Sequence[str]) -> None:
        if not parents:
            raise TopologyError(f"{name!r} needs at least one parent")
        for parent in parents:
            if parent not in self._sources and parent not in self._processors:
                raise TopologyError(f"{name!r}: unknown parent {parent!r}")

    def build(self) -> BuiltTopology:
        """Split into sub-topologies, numbered in the order their first node was added.

        Raises TopologyError when there is no source, or when a store added with
        ``add_store`` is listed by no processor (it would belong to no sub-topology and
        silently never exist).
        """
        if not self._sources:
            raise TopologyError("a topology needs at least one source")
        used = {store for proc in self._processors.values() for store in proc.stores}
        unused = sorted(n for n, s in self._stores.items() if not s.is_table and n not in used)
        if unused:
            raise TopologyError(
                f"stores {unused} are used by no processor (list them in add_processor(stores=...))"
            )
        groups = Components(self._order)
        for node in self._downstream_nodes():
            for parent in node.parents:
                groups.union(node.name, parent)
        for proc in self._processors.values():
            for store in proc.stores:
                if store not in self._globals:  # read whole on every task: joins no one
                    groups.union(proc.name, f"store:{store}")
        for source in self._sources.values():
            if source.table_store:
                groups.union(source.name, f"store:{source.table_store}")
        return BuiltTopology(
            tuple(self._subtopology(i, m) for i, m in enumerate(groups.groups())),
            tuple(self._globals.values()),
        )

    def _downstream_nodes(self) -> list[ProcessorNode | SinkNode]:
        """Processors and sinks in the order they were added (forward follows this order)."""
        nodes: dict[str, ProcessorNode | SinkNode] = {**self._processors, **self._sinks}
        return [nodes[name] for name in self._order if name in nodes]

    def _subtopology(self, index: int, members: list[str]) -> Subtopology:
        names = set(members)
        sources = tuple(s for n, s in self._sources.items() if n in names)
        if not sources:
            raise TopologyError(f"nodes {sorted(names)} are not reachable from any source")
        store_names = {m[len("store:") :] for m in members if m.startswith("store:")}
        children: dict[str, list[str]] = {}
        for node in self._downstream_nodes():
            if node.name in names:
                for parent in node.parents:
                    children.setdefault(parent, []).append(node.name)
        return Subtopology(
            id=index,
            sources=sources,
            processors=tuple(p for n, p in self._processors.items() if n in names),
            sinks=tuple(s for n, s in self._sinks.items() if n in names),
            stores=tuple(s for n, s in self._stores.items() if n in store_names),
            global_stores=tuple(
                s
                for n, s in self._globals.items()
                if any(n in p.stores for p in self._processors.values() if p.name in names)
            ),
            children={k: tuple(v) for k, v in children.items()},
        )
