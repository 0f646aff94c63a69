"""The DSL's joins, compiled onto the join operators (``worker/operators/joins/``).

``KStream.join``/``left_join``/``outer_join`` and ``KTable.join``/``left_join``/
``outer_join`` call these. Each records one plan step that adds the operator's
processors and stores, then a pass-through node under the join's name (a join of two
inputs has a processor per side; the handle it returns is one node). A side whose key
may have changed is repartitioned first (through ``<application.id>-<join>-left`` or
``-right-repartition``), so both inputs of a join are co-partitioned by key; inputs
that are topics of unequal partition counts stop ``worker start`` with exit 1, naming
each topic and its count. A join with a global table needs neither.

Semantics: docs/joins.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.dsl.plan import Compilation, RepartitionTopic
from worker.errors import TopologyError
from worker.operators import stateless
from worker.operators.joins import foreign_key, stream_stream, stream_table, table_table
from worker.operators.joins.foreign_key import (
    FkKind,
    ForeignKeyExtractor,
    ForeignKeySerdes,
    ForeignKeyTopics,
)
from worker.operators.joins.kinds import Joiner, Kind, check_join
from worker.operators.joins.stream_table import KeyMapper
from worker.processing.join_windows import JoinWindows
from worker.serde import Serde

if TYPE_CHECKING:
    from worker.dsl.builder import StreamsBuilder
    from worker.dsl.handle import Handle
    from worker.dsl.stream import KStream
    from worker.dsl.table import KTable


class GlobalKTable:
    """A global table (``StreamsBuilder.global_table``): every instance holds all of it;
    only ``KStream.join``/``left_join`` with a ``key_mapper`` read it."""

    def __init__(self, store: str, key_serde: Serde, value_serde: Serde) -> None:
        self.store = store
        self.key_serde = key_serde
        self.value_serde = value_serde


def stream_table_join(
    stream: KStream,
    table: KTable | GlobalKTable,
    joiner: Joiner,
    *,
    left: bool,
    key_mapper: KeyMapper | None,
    grace_ms: int,
    name: str | None,
    value_serde: Serde | None,
) -> KStream:
    """``stream`` joined with ``table`` (see the module doc)."""
    from worker.dsl.stream import KStream

    builder = stream._builder
    node = builder._plan.name("KSTREAM-LEFTJOIN" if left else "KSTREAM-JOIN", name)
    if isinstance(table, GlobalKTable):
        if key_mapper is None:
            raise TopologyError(f"join {node!r}: a global table join needs a key_mapper")
        source, store = stream, table.store
    else:
        if key_mapper is not None:
            raise TopologyError(f"join {node!r}: key_mapper is for global tables only")
        source, (_node, store) = builder._repartitioned(stream, node), _materialized(table, node)
    check_join(node, "left" if left else "inner", joiner)

    def write(c: Compilation) -> None:
        stream_table.add_stream_table_join(
            c.topology,
            node,
            source.node,
            store,
            joiner,
            left=left,
            key_mapper=key_mapper,
            grace_ms=grace_ms,
            key_serde=source.key_serde,
            value_serde=source.value_serde,
        )

    builder._plan.add("join", node, write)
    return KStream(builder, node, source.key_serde, value_serde or source.value_serde)


def stream_stream_join(
    stream: KStream,
    other: KStream,
    joiner: Joiner,
    windows: JoinWindows,
    *,
    kind: Kind,
    name: str | None,
    value_serde: Serde | None,
) -> KStream:
    """``stream`` joined with ``other`` in ``windows`` (see the module doc)."""
    from worker.dsl.stream import KStream

    builder = stream._builder
    node = _join_node(stream, f"KSTREAM-{kind.upper()}JOIN", name, kind, joiner)
    if not isinstance(windows, JoinWindows):
        raise TopologyError(f"join {node!r}: windows must be a JoinWindows")
    left = builder._repartitioned(stream, f"{node}-left")
    right = builder._repartitioned(other, f"{node}-right")
    join = f"{node}-join"

    def write(c: Compilation) -> None:
        stream_stream.add_stream_stream_join(
            c.topology,
            join,
            left.node,
            right.node,
            windows,
            joiner,
            kind=kind,
            key_serde=left.key_serde,
            left_serde=left.value_serde,
            right_serde=right.value_serde,
        )
        c.topology.add_processor(node, stateless.passing, stream_stream.result_parents(join))

    builder._plan.add("join", node, write)
    return KStream(builder, node, left.key_serde, value_serde or left.value_serde)


def table_table_join(
    table: KTable,
    other: KTable,
    joiner: Joiner,
    *,
    kind: Kind,
    name: str | None,
    value_serde: Serde | None,
) -> KTable:
    """``table`` joined with ``other`` on their keys: a table in store ``name``."""
    from worker.dsl.table import KTable

    builder = table._builder
    node = _join_node(table, f"KTABLE-{kind.upper()}JOIN", name, kind, joiner)
    left, right = _materialized(table, node), _materialized(other, node)
    serde = value_serde or table.value_serde
    store = f"{node}-store"

    def write(c: Compilation) -> None:
        table_table.add_table_table_join(
            c.topology,
            store,
            left,
            right,
            joiner,
            kind=kind,
            key_serde=table.key_serde,
            value_serde=serde,
        )
        c.topology.add_processor(node, stateless.passing, table_table.result_parents(store))

    builder._plan.add("join", node, write)
    return KTable(builder, node, table.key_serde, serde, store)


def foreign_key_join(
    table: KTable,
    other: KTable,
    foreign_key_extractor: ForeignKeyExtractor,
    joiner: Joiner,
    *,
    kind: FkKind,
    name: str | None,
    value_serde: Serde | None,
) -> KTable:
    """``table`` joined with the row of ``other`` that ``foreign_key_extractor(value)``
    names (``operators/joins/foreign_key.py``), through ``<application.id>-<name>-
    subscription-repartition`` (keyed by foreign key, as many partitions as ``other``)
    and ``-response-repartition`` (keyed by ``table``'s key, as many as ``table``): a
    table in store ``<name>-store``."""
    from worker.dsl.table import KTable

    builder = table._builder
    node = _join_node(table, f"KTABLE-FK-{kind.upper()}JOIN", name, kind, joiner)
    if not callable(foreign_key_extractor):
        raise TopologyError(f"join {node!r}: foreign_key_extractor must be callable")
    left, right = _materialized(table, node), _materialized(other, node)
    serde = value_serde or table.value_serde
    store = f"{node}-store"
    serdes = ForeignKeySerdes(
        table.key_serde, table.value_serde, other.key_serde, other.value_serde, serde
    )

    def write(c: Compilation) -> None:
        names = (f"{node}-subscription", f"{node}-response")
        topics = ForeignKeyTopics(*(c.repartition_topic(n) for n in names))
        foreign_key.add_foreign_key_join(
            c.topology,
            store,
            left,
            right,
            foreign_key_extractor,
            joiner,
            kind=kind,
            topics=topics,
            serdes=serdes,
        )
        c.topology.add_processor(node, stateless.passing, foreign_key.result_parents(store))
        sinks = foreign_key.internal_sinks(store)
        for internal, topic, sink in zip(
            names, (topics.subscription, topics.response), sinks, strict=True
        ):
            c.repartitions.append(RepartitionTopic(internal, topic, sink))

    builder._plan.add("join", node, write)
    return KTable(builder, node, table.key_serde, serde, store)


def _join_node(side: Handle, prefix: str, name: str | None, kind: Kind, joiner: Joiner) -> str:
    """The join's node, ``name`` or ``<prefix>-<counter>``, once ``joiner`` is known to
    suit ``kind`` (so the error names the join)."""
    node = side._builder._plan.name(prefix, name)
    check_join(node, kind, joiner)
    return node


def _materialized(table: KTable, join: str) -> tuple[str, str]:
    """``(the node forwarding table's changes once its store holds them, that store)``,
    the order the table-table operators take a side in. A table computed as it flows
    (``filter``, ``map_values``) gets a store, ``<join>-<its node>``, kept by a node
    after it."""
    if table.store is not None:
        return table.node, table.store
    builder = table._builder
    store = f"{join}-{table.node}"
    builder._add_store(store, table.key_serde, table.value_serde)
    node = builder._processor(
        "KTABLE-MATERIALIZE", stateless.materializing(store), [table.node], None, [store]
    )
    return node, store


def builder_global_table(
    builder: StreamsBuilder, topic: str, key_serde: Serde, value_serde: Serde, name: str | None
) -> GlobalKTable:
    """``StreamsBuilder.global_table``: ``topic`` held whole by every instance."""
    store = builder._plan.name("GLOBALKTABLE-SOURCE-STATE-STORE", name)

    def write(c: Compilation) -> None:
        c.topology.add_global_table(store, topic, key_serde, value_serde)

    builder._plan.add("global table", store, write)
    return GlobalKTable(store, key_serde, value_serde)


__all__ = [
    "GlobalKTable",
    "builder_global_table",
    "foreign_key_join",
    "stream_stream_join",
    "stream_table_join",
    "table_table_join",
]
