"""``StreamsBuilder``: the DSL's entry point (Kafka Streams' names, in snake_case).

The builder records a logical graph (:mod:`worker.dsl.plan`) and compiles it onto the
Processor API's :class:`~worker.processing.topology.Topology` at :meth:`build`, so tasks,
commits, exactly-once, standbys, restores and the HTTP query API apply unchanged. Hand
``worker start --app module:attr`` the builder itself (or a function returning it): the
worker builds it with its ``application.id``, which names the repartition topics.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.dsl.joins import GlobalKTable, builder_global_table
from worker.dsl.plan import Compilation, DslTopology, Plan, RepartitionTopic
from worker.dsl.stream import KStream
from worker.dsl.table import KTable
from worker.operators import stateless
from worker.operators.joins.tables import add_versioned_table, table_node
from worker.processing.built_topology import InitFn, ProcessorFn
from worker.serde import JSON, STR, Serde

# What a source reads when no serde is given: string keys, JSON values.
DEFAULT_KEY_SERDE: Serde = STR
DEFAULT_VALUE_SERDE: Serde = JSON


class StreamsBuilder:
    """Builds a topology from streams and tables; see docs/dsl.md."""

    def __init__(self) -> None:
        self._plan = Plan()

    # -- sources ---------------------------------------------------------------------

    def stream(
        self,
        topic: str,
        *,
        key_serde: Serde = DEFAULT_KEY_SERDE,
        value_serde: Serde = DEFAULT_VALUE_SERDE,
        name: str | None = None,
    ) -> KStream:
        """The records of ``topic`` as a stream."""
        node = self._plan.name("KSTREAM-SOURCE", name)

        def write(c: Compilation) -> None:
            c.topology.add_source(node, topic, key_serde, value_serde)

        self._plan.add("stream", node, write)
        return KStream(self, node, key_serde, value_serde)

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde = DEFAULT_KEY_SERDE,
        value_serde: Serde = DEFAULT_VALUE_SERDE,
        name: str | None = None,
        history_ms: int | None = None,
    ) -> KTable:
        """``topic`` as a table in store ``name`` (queryable): the latest value per key, a
        None value deleting it. The topic should be compacted; it is also the store's
        changelog (``Topology.add_table``), so a Spark job can load it.

        With ``history_ms`` the table is *versioned* (``operators/joins/tables.py``): it
        keeps each key's values over that much time, in a store with its own changelog,
        so a stream joins it as of each record's time; out-of-order updates are kept as
        history and not passed on."""
        store = self._plan.name("KTABLE-SOURCE-STATE-STORE", name)
        if history_ms is not None:

            def write_versioned(c: Compilation) -> None:
                add_versioned_table(
                    c.topology,
                    store,
                    topic,
                    history_ms,
                    key_serde=key_serde,
                    value_serde=value_serde,
                )

            self._plan.add("table", store, write_versioned)
            return KTable(self, table_node(store), key_serde, value_serde, store)

        def write(c: Compilation) -> None:
            c.topology.add_table(store, topic, key_serde, value_serde)

        self._plan.add("table", store, write)
        return KTable(self, store, key_serde, value_serde, store)

    def global_table(
        self,
        topic: str,
        *,
        key_serde: Serde = DEFAULT_KEY_SERDE,
        value_serde: Serde = DEFAULT_VALUE_SERDE,
        name: str | None = None,
    ) -> GlobalKTable:
        """``topic`` as a global table in store ``name``: every instance holds all of its
        partitions (``worker/runtime/global_tables.py``), read to the end before processing
        starts; streams join it with a ``key_mapper``, with no co-partitioning."""
        return builder_global_table(self, topic, key_serde, value_serde, name)

    def add_state_store(
        self,
        name: str,
        *,
        key_serde: Serde = DEFAULT_KEY_SERDE,
        value_serde: Serde = DEFAULT_VALUE_SERDE,
        ttl_ms: int | None = None,
    ) -> StreamsBuilder:
        """A key-value store for ``KStream.process(fn, stores=[name])`` (``Topology.add_store``)."""
        self._add_store(name, key_serde, value_serde, ttl_ms)
        return self

    # -- compiling -------------------------------------------------------------------

    def build(self, application_id: str | None = None) -> DslTopology:
        """A fresh ``Topology`` of everything recorded so far; ``application_id`` names the
        repartition topics and is required when there are any.

        Raises:
            TopologyError: as the Topology's methods, or a repartition without an id.
        """
        return self._plan.compile(application_id)

    def describe(self, application_id: str | None = None) -> str:
        """The compiled topology as text (sub-topologies, sources, processors with their
        stores, sinks, repartition topics), like Kafka Streams' TopologyDescription."""
        from worker.dsl.describe import describe

        return describe(self.build(application_id))

    # -- what the handles call -------------------------------------------------------

    def _processor(
        self,
        prefix: str,
        fn: ProcessorFn,
        parents: Sequence[str],
        name: str | None,
        stores: Sequence[str],
        init: InitFn | None = None,
    ) -> str:
        node = self._plan.name(prefix, name)
        parent_nodes, store_names = tuple(parents), tuple(stores)

        def write(c: Compilation) -> None:
            c.topology.add_processor(node, fn, parent_nodes, store_names, init=init)

        return self._plan.add("processor", node, write)

    def _add_store(
        self, name: str, key_serde: Serde, value_serde: Serde, ttl_ms: int | None = None
    ) -> None:
        def write(c: Compilation) -> None:
            c.topology.add_store(name, key_serde, value_serde, ttl_ms=ttl_ms)

        self._plan.add("store", f"store:{name}", write)

    def _sink(
        self, topic: str, parent: str, name: str | None, key_serde: Serde, value_serde: Serde
    ) -> str:
        node = self._plan.name("KSTREAM-SINK", name)

        def write(c: Compilation) -> None:
            c.topology.add_sink(node, topic, [parent], key_serde, value_serde)

        return self._plan.add("sink", node, write)

    def _repartitioned(self, stream: KStream, name: str) -> KStream:
        """``stream`` itself when its key is unchanged, else the stream read back from
        repartition topic ``<application.id>-<name>-repartition``."""
        if not stream.repartition_required:
            return stream
        return self._repartition(stream, name, stream.value_serde)

    def _repartition(self, stream: KStream, name: str, value_serde: Serde) -> KStream:
        """sink -> ``<application.id>-<name>-repartition`` -> source, None keys dropped
        in front of the sink; the source starts a sub-topology of its own."""
        drop = self._processor(
            "KSTREAM-FILTER",
            stateless.dropping_null_keys,
            [stream.node],
            f"{name}-repartition-filter",
            (),
        )
        sink, source = f"{name}-repartition-sink", f"{name}-repartition-source"
        key_serde = stream.key_serde

        def write(c: Compilation) -> None:
            topic = c.repartition_topic(name)
            c.topology.add_sink(sink, topic, [drop], key_serde, value_serde)
            c.topology.add_source(source, topic, key_serde, value_serde)
            c.repartitions.append(RepartitionTopic(name, topic, sink))

        self._plan.add("repartition", source, write)
        return KStream(self, source, key_serde, value_serde)
