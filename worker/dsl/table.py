"""``KTable``: a changelog stream, each record the latest value of its key (a None value,
a tombstone, deletes it), and its re-grouping with an adder and a subtractor.

A table handle is a node forwarding each row's new value (None for a removed row) and,
where it is materialised, the store holding the rows (``store``; None for a table derived
by ``filter`` or ``map_values``, which is computed as it flows). Re-grouping and its
aggregation are :mod:`worker.operators.table_regroup`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worker.dsl.handle import Handle
from worker.operators import stateless
from worker.operators.change import ChangeSerde
from worker.operators.table_regroup import TableAggregation, TableRegroup, table_reducer
from worker.processing.built_topology import ProcessorFn
from worker.serde import JSON, Serde

if TYPE_CHECKING:
    from worker.dsl.builder import StreamsBuilder
    from worker.dsl.stream import KStream
    from worker.operators.joins.foreign_key import FkKind


class KTable(Handle):
    """A table: ``store`` names where its rows are kept, when they are (``queryable``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde,
        value_serde: Serde,
        store: str | None,
        *,
        windowed: bool = False,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self.store = store
        self.windowed = windowed

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: str | None = None) -> KTable:
        """Rows for which ``predicate(key, value)`` holds; a row that stops passing is
        forwarded as a tombstone, so downstream removes it."""
        return self._then("KTABLE-FILTER", stateless.table_filtering(predicate), name, None)

    def filter_not(
        self, predicate: Callable[[Any, Any], bool], *, name: str | None = None
    ) -> KTable:
        """Rows for which ``predicate(key, value)`` does not hold (as :meth:`filter`)."""
        fn = stateless.table_filtering(predicate, keep=False)
        return self._then("KTABLE-FILTER", fn, name, None)

    def map_values(
        self,
        mapper: Callable[[Any], Any],
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KTable:
        """``mapper(value)`` for each row; tombstones stay tombstones."""
        fn = stateless.mapping_values(mapper, skip_none=True)
        return self._then("KTABLE-MAPVALUES", fn, name, value_serde)

    def to_stream(self, *, name: str | None = None) -> KStream:
        """Every update of the table as a stream record (tombstones as None values).

        Without a ``name`` no node is added: a table's node already forwards each update
        as a record, and a pass-through node would cost a call per record."""
        from worker.dsl.stream import KStream

        node = self.node
        if name is not None:
            node = self._child("KTABLE-TOSTREAM", stateless.passing, name)
        return KStream(self._builder, node, self.key_serde, self.value_serde)

    # -- joins (worker/dsl/joins.py, docs/joins.md) ------------------------------------
    # Each join spells out its own parameters, as Kafka Streams names them: they are the
    # signature help(), IDEs and mypy show. A shared list (partialmethod, a copying
    # decorator) would hide it; the shared work is in ``_join`` and worker/dsl/joins.py.

    def join(
        self,
        other: KTable,
        joiner_or_extractor: Callable[..., Any],
        joiner: Callable[[Any, Any], Any] | None = None,
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KTable:
        """``join(other, joiner)``: the rows whose key both tables hold, ``joiner(this
        row, other row)``, updated from either side; a row that goes away is a tombstone.

        ``join(other, foreign_key_extractor, joiner)``: each row joined with the row of
        ``other`` whose key is ``foreign_key_extractor(this row)`` (KIP-213), through a
        subscription and a response topic; no co-partitioning needed. Rows without a
        match (or without a foreign key) are not in the result."""
        return self._join(other, joiner_or_extractor, joiner, "inner", name, value_serde)

    def left_join(
        self,
        other: KTable,
        joiner_or_extractor: Callable[..., Any],
        joiner: Callable[[Any, Any], Any] | None = None,
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KTable:
        """Every row of this table, joined with the other's row or ``None``: by key
        (``left_join(other, joiner)``) or by foreign key (``left_join(other,
        foreign_key_extractor, joiner)``, as :meth:`join`)."""
        return self._join(other, joiner_or_extractor, joiner, "left", name, value_serde)

    def outer_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KTable:
        """Every row of either table, joined with the other's row or ``None``."""
        from worker.dsl.joins import table_table_join

        return table_table_join(
            self, other, joiner, kind="outer", name=name, value_serde=value_serde
        )

    def _join(
        self,
        other: KTable,
        first: Callable[..., Any],
        joiner: Callable[[Any, Any], Any] | None,
        kind: FkKind,
        name: str | None,
        value_serde: Serde | None,
    ) -> KTable:
        """A join on the key (no ``joiner``: ``first`` is the joiner) or by foreign key
        (``first`` extracts it)."""
        from worker.dsl.joins import foreign_key_join, table_table_join

        if joiner is None:
            return table_table_join(
                self, other, first, kind=kind, name=name, value_serde=value_serde
            )
        return foreign_key_join(
            self, other, first, joiner, kind=kind, name=name, value_serde=value_serde
        )

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KGroupedTable:
        """Rows re-grouped by ``selector(key, value) -> (group_key, group_value)``, for an
        aggregation with an adder and a subtractor; always through a repartition topic."""
        return KGroupedTable(self, selector, name, *self._serdes(key_serde, value_serde))

    def _then(
        self, prefix: str, fn: ProcessorFn, name: str | None, value_serde: Serde | None
    ) -> KTable:
        """The table out of processor ``fn`` after this one, computed as it flows (no store)."""
        node = self._child(prefix, fn, name)
        return KTable(self._builder, node, *self._serdes(None, value_serde), None)


class KGroupedTable:
    """A table re-grouped by another key, waiting for ``aggregate``, ``reduce`` or ``count``."""

    def __init__(
        self,
        table: KTable,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        name: str | None,
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        self._table = table
        self._selector = selector
        self._name = name
        self._key_serde = key_serde
        self._value_serde = value_serde

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        *,
        name: str | None = None,
        value_serde: Serde = JSON,
    ) -> KTable:
        """Per group: ``adder(key, value, aggregate)`` for a row's new value and
        ``subtractor(key, value, aggregate)`` for its old one; from ``initializer()``."""
        store = self._store_name(name)
        operator = TableAggregation(store, initializer, adder, subtractor)
        return self._aggregate(store, operator, value_serde)

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
    ) -> KTable:
        """Per group: ``adder(aggregate, value)``, ``subtractor(aggregate, value)``."""
        store = self._store_name(name)
        return self._aggregate(store, table_reducer(store, adder, subtractor), self._value_serde)

    def count(self, *, name: str | None = None) -> KTable:
        """Rows per group."""
        store = self._store_name(name)
        operator = TableAggregation(store, _zero, _plus_one, _minus_one)
        return self._aggregate(store, operator, JSON)

    def _store_name(self, name: str | None) -> str:
        return self._table._builder._plan.name("KTABLE-AGGREGATE-STATE-STORE", name)

    def _aggregate(self, store: str, operator: TableAggregation, value_serde: Serde) -> KTable:
        from worker.dsl.stream import KStream

        table = self._table
        builder = table._builder
        topic_name = self._name or store
        prior = f"{topic_name}-prior"
        builder._add_store(prior, table.key_serde, table.value_serde)
        regroup = TableRegroup(prior, self._selector)
        mapped = builder._processor("KTABLE-SELECT", regroup.process, [table.node], None, [prior])
        changes = KStream(builder, mapped, self._key_serde, ChangeSerde(self._value_serde), True)
        grouped = builder._repartition(changes, topic_name, changes.value_serde)
        builder._add_store(store, self._key_serde, value_serde)
        node = builder._processor(
            "KTABLE-AGGREGATE", operator.process, [grouped.node], None, [store]
        )
        return KTable(builder, node, self._key_serde, value_serde, store)


def _zero() -> int:
    return 0


def _plus_one(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1


def _minus_one(key: Any, value: Any, aggregate: int) -> int:
    return aggregate - 1
