"""``KStream``: a record stream, every record a fact of its own (Kafka Streams' KStream).

A handle onto one node of the builder's plan; every operation records a step and returns a
new handle. Operations that may change the key (``map``, ``flat_map``, ``select_key``,
``process``) mark the result *repartition required*; ``filter``, ``map_values``, ``peek``
and the like keep the mark; ``merge`` ORs it; an operation that needs records grouped by
key (an aggregation, ``to_table``) consumes it by inserting a repartition topic, and only
then (reference dsl-and-joins.md §1.3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from worker.dsl.handle import Handle
from worker.errors import TopologyError
from worker.operators import stateless
from worker.processing.built_topology import InitFn, ProcessorFn
from worker.serde import Serde

if TYPE_CHECKING:
    from worker.dsl.builder import StreamsBuilder
    from worker.dsl.grouped import KGroupedStream
    from worker.dsl.joins import GlobalKTable
    from worker.dsl.table import KTable
    from worker.operators.joins.kinds import Kind
    from worker.processing.join_windows import JoinWindows


class KStream(Handle):
    """A stream of (key, value) records with the serdes that read and write them."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde,
        value_serde: Serde,
        repartition_required: bool = False,
    ) -> None:
        super().__init__(builder, node, key_serde, value_serde)
        self.repartition_required = repartition_required

    def _then(
        self,
        prefix: str,
        fn: ProcessorFn,
        name: str | None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        *,
        rekeyed: bool = False,
        stores: Sequence[str] = (),
        init: InitFn | None = None,
    ) -> KStream:
        """The stream out of processor ``fn`` after this one (``Handle._child``)."""
        node = self._child(prefix, fn, name, stores, init)
        return self._at(node, key_serde, value_serde, rekeyed=rekeyed)

    def _at(
        self,
        node: str,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        *,
        rekeyed: bool = False,
    ) -> KStream:
        """This stream's records as ``node`` forwards them: they need repartitioning if
        these do or if ``rekeyed`` (their key may have changed on the way)."""
        flagged = self.repartition_required or rekeyed
        return KStream(self._builder, node, *self._serdes(key_serde, value_serde), flagged)

    # -- stateless -------------------------------------------------------------------

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: str | None = None) -> KStream:
        """The records for which ``predicate(key, value)`` is true."""
        return self._then("KSTREAM-FILTER", stateless.filtering(predicate), name)

    def filter_not(
        self, predicate: Callable[[Any, Any], bool], *, name: str | None = None
    ) -> KStream:
        """The records for which ``predicate(key, value)`` is false."""
        return self._then("KSTREAM-FILTER", stateless.filtering(predicate, keep=False), name)

    def map(
        self,
        mapper: Callable[[Any, Any], tuple[Any, Any]],
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """``mapper(key, value) -> (key, value)``; may change the key."""
        fn = stateless.mapping(mapper)
        return self._then("KSTREAM-MAP", fn, name, key_serde, value_serde, rekeyed=True)

    def map_values(
        self,
        mapper: Callable[[Any], Any],
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """``mapper(value) -> value``; the key is kept."""
        fn = stateless.mapping_values(mapper)
        return self._then("KSTREAM-MAPVALUES", fn, name, value_serde=value_serde)

    def flat_map(
        self,
        mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]],
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """``mapper(key, value)`` -> zero or more (key, value) pairs; may change the key."""
        fn = stateless.flat_mapping(mapper)
        return self._then("KSTREAM-FLATMAP", fn, name, key_serde, value_serde, rekeyed=True)

    def flat_map_values(
        self,
        mapper: Callable[[Any], Iterable[Any]],
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """``mapper(value)`` -> zero or more values, each with the record's key."""
        fn = stateless.flat_mapping_values(mapper)
        return self._then("KSTREAM-FLATMAPVALUES", fn, name, value_serde=value_serde)

    def peek(self, action: Callable[[Any, Any], object], *, name: str | None = None) -> KStream:
        """Call ``action(key, value)`` for each record (a side effect) and pass it on."""
        return self._then("KSTREAM-PEEK", stateless.peeking(action), name)

    def select_key(
        self,
        selector: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
    ) -> KStream:
        """``selector(key, value)`` becomes the key."""
        fn = stateless.selecting_key(selector)
        return self._then("KSTREAM-KEY-SELECT", fn, name, key_serde, rekeyed=True)

    def merge(self, other: KStream, *, name: str | None = None) -> KStream:
        """The records of both streams (this one's serdes)."""
        node = self._builder._processor(
            "KSTREAM-MERGE", stateless.passing, [self.node, other.node], name, ()
        )
        return self._at(node, rekeyed=other.repartition_required)

    def split(self, *, prefix: str = "") -> BranchedKStream:
        """Named branches: ``split().branch(pred, name="a").default_branch(name="b")``
        returns ``{prefix + "a": KStream, ...}``; each record goes to the first branch
        whose predicate holds."""
        return BranchedKStream(self, prefix)

    def process(
        self,
        fn: ProcessorFn,
        *,
        stores: Sequence[str] = (),
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        init: InitFn | None = None,
    ) -> KStream:
        """The escape hatch into the Processor API: ``fn(ctx, key, value)`` with the
        stores named in ``stores`` (``builder.add_state_store``), forwarding with
        ``ctx.forward``; ``init(ctx)`` where it schedules its punctuators
        (``Topology.add_processor``). It may change the key: a stateful operation after it
        repartitions."""
        return self._then(
            "KSTREAM-PROCESSOR",
            fn,
            name,
            key_serde,
            value_serde,
            rekeyed=True,
            stores=stores,
            init=init,
        )

    # -- sinks and tables ------------------------------------------------------------

    def to(
        self,
        topic: str,
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> None:
        """Write the records to ``topic``, partitioned by murmur2 of the key bytes."""
        self._builder._sink(topic, self.node, name, *self._serdes(key_serde, value_serde))

    def to_table(self, *, name: str | None = None, value_serde: Serde | None = None) -> KTable:
        """The latest value per key, in store ``name`` (queryable): a None value deletes."""
        from worker.dsl.table import KTable

        store = self._builder._plan.name("KSTREAM-TOTABLE-STATE-STORE", name)
        stream = self._builder._repartitioned(self, store)
        serde = value_serde or self.value_serde
        self._builder._add_store(store, stream.key_serde, serde)
        node = self._builder._processor(
            "KSTREAM-TOTABLE", stateless.materializing(store), [stream.node], None, [store]
        )
        return KTable(self._builder, node, stream.key_serde, serde, store)

    # -- joins (worker/dsl/joins.py, docs/joins.md) ------------------------------------
    # Each join spells out its own parameters, as Kafka Streams names them: they are the
    # signature help(), IDEs and mypy show. A shared list (partialmethod, a copying
    # decorator) would hide it; the shared work is in ``_join`` and worker/dsl/joins.py.

    def join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner: Callable[[Any, Any], Any],
        windows: JoinWindows | None = None,
        *,
        key_mapper: Callable[[Any, Any], Any] | None = None,
        grace_ms: int = 0,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """Inner join, ``joiner(this value, other value)``: with a table, each record
        joins the table's value for its key (as of the record's time for a versioned
        table; ``grace_ms`` holds records back for late versions); with a global table,
        for ``key_mapper(key, value)``; with a stream, every record of it within
        ``windows``. A re-keyed side is repartitioned first."""
        return self._join(other, joiner, windows, "inner", key_mapper, grace_ms, name, value_serde)

    def left_join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner: Callable[[Any, Any], Any],
        windows: JoinWindows | None = None,
        *,
        key_mapper: Callable[[Any, Any], Any] | None = None,
        grace_ms: int = 0,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """As :meth:`join`, and a record with no partner joins ``None`` (with a stream:
        once its window has closed, never earlier)."""
        return self._join(other, joiner, windows, "left", key_mapper, grace_ms, name, value_serde)

    def outer_join(
        self,
        other: KStream,
        joiner: Callable[[Any, Any], Any],
        windows: JoinWindows,
        *,
        name: str | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """Both streams within ``windows``; a record of either side with no partner
        joins ``None`` once its window has closed."""
        return self._join(other, joiner, windows, "outer", None, 0, name, value_serde)

    def _join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner: Callable[[Any, Any], Any],
        windows: JoinWindows | None,
        kind: Kind,
        key_mapper: Callable[[Any, Any], Any] | None,
        grace_ms: int,
        name: str | None,
        value_serde: Serde | None,
    ) -> KStream:
        from worker.dsl import joins

        if isinstance(other, KStream):
            if windows is None:
                raise TopologyError("a stream-stream join needs windows=JoinWindows(...)")
            return joins.stream_stream_join(
                self, other, joiner, windows, kind=kind, name=name, value_serde=value_serde
            )
        if windows is not None or kind == "outer":
            raise TopologyError("a stream-table join is inner or left, without windows")
        return joins.stream_table_join(
            self,
            other,
            joiner,
            left=kind == "left",
            key_mapper=key_mapper,
            grace_ms=grace_ms,
            name=name,
            value_serde=value_serde,
        )

    def group_by_key(
        self,
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KGroupedStream:
        """The records grouped by their key, for an aggregation; repartitioned first (by
        topic ``name``, or the aggregation's store name) if the key may have changed."""
        from worker.dsl.grouped import KGroupedStream

        return KGroupedStream(self._builder, self._at(self.node, key_serde, value_serde), name)

    def group_by(
        self,
        selector: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KGroupedStream:
        """Grouped by ``selector(key, value)``: always through a repartition topic."""
        rekeyed = self.select_key(selector, key_serde=key_serde)
        return rekeyed.group_by_key(name=name, value_serde=value_serde)


class BranchedKStream:
    """What ``split()`` returns: add branches in order, then ``default_branch`` or
    ``no_default_branch`` to get the branches by name."""

    def __init__(self, stream: KStream, prefix: str) -> None:
        self._stream = stream
        self._prefix = prefix
        self._branches: list[tuple[str, Callable[[Any, Any], bool] | None]] = []

    def branch(self, predicate: Callable[[Any, Any], bool], *, name: str) -> BranchedKStream:
        """Records for which ``predicate(key, value)`` holds and no earlier branch took."""
        if not callable(predicate):
            raise TopologyError(f"branch {name!r}: the predicate is not callable")
        return self._add(name, predicate)

    def default_branch(self, *, name: str = "default") -> dict[str, KStream]:
        """Every record no branch took goes to ``name``; returns the branches."""
        return self._add(name, None).no_default_branch()

    def no_default_branch(self) -> dict[str, KStream]:
        """The branches; records no branch took are dropped."""
        if not self._branches:
            raise TopologyError("split() needs at least one branch")
        names = [self._prefix + name for name, _ in self._branches]
        fn = stateless.branching(list(zip(names, (p for _, p in self._branches), strict=True)))
        splitter = self._stream._then("KSTREAM-BRANCH", fn, None)
        return {
            name: splitter._then("KSTREAM-BRANCHCHILD", stateless.passing, name) for name in names
        }

    def _add(self, name: str, predicate: Callable[[Any, Any], bool] | None) -> BranchedKStream:
        if any(existing == name for existing, _ in self._branches):
            raise TopologyError(f"split(): branch {name!r} given twice")
        self._branches.append((name, predicate))
        return self
