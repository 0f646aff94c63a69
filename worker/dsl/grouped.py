"""Grouped streams and their aggregations: ``count``, ``reduce``, ``aggregate``, plain or
in windows (``windowed_by``).

Each aggregation is a table stored under its ``name`` (the HTTP query API serves it by
that name) and forwards every update. When the grouped stream's key may have changed, the
records first go through the repartition topic named after the grouping's ``name`` or,
without one, the aggregation's store (Kafka Streams' rule).

Windowed aggregations compile to ``Topology.add_windowed_aggregation`` (docs/windows.md):
the keys downstream are ``Windowed(key, start_ms, end_ms)``, emitted on every update or
once per window when it closes (``emit="final"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worker.errors import TopologyError
from worker.operators.stream_aggregation import (
    StreamAggregation,
    counting,
    reducing,
)
from worker.processing.windows import SessionWindows, Windows
from worker.serde import JSON, Serde

if TYPE_CHECKING:
    from worker.dsl.builder import StreamsBuilder
    from worker.dsl.stream import KStream
    from worker.dsl.table import KTable


class KGroupedStream:
    """Records grouped by key (``group_by_key``/``group_by``), waiting for an aggregation."""

    def __init__(self, builder: StreamsBuilder, stream: KStream, name: str | None) -> None:
        self._builder = builder
        self._stream = stream
        self._name = name
        self._input_stream: KStream | None = None  # repartitioned once, for every aggregation

    def count(self, *, name: str | None = None) -> KTable:
        """The number of records per key, in store ``name``."""
        store = self._store_name(name)
        return self._aggregate(store, counting(store), JSON)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: str | None = None) -> KTable:
        """``reducer(aggregate, value)`` per key; a key's first value is its aggregate.
        The aggregate has the values' serde."""
        store = self._store_name(name)
        return self._aggregate(store, reducing(store, reducer), self._stream.value_serde)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        *,
        name: str | None = None,
        value_serde: Serde = JSON,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` per key, starting from ``initializer()``;
        the aggregate is stored with ``value_serde``."""
        store = self._store_name(name)
        return self._aggregate(
            store, StreamAggregation(store, initializer, aggregator), value_serde
        )

    def windowed_by(self, windows: Windows) -> WindowedKStream:
        """Aggregate per key and window: ``tumbling``, ``hopping``, ``sliding`` or ``session``
        from :mod:`worker.processing.windows`."""
        return WindowedKStream(self, windows)

    def _store_name(self, name: str | None) -> str:
        return self._builder._plan.name("KSTREAM-AGGREGATE-STATE-STORE", name)

    def _input(self, store: str) -> KStream:
        """The stream to aggregate: repartitioned first if its key may have changed. Several
        aggregations of one grouped stream share its repartition topic (named after the
        grouping, or the first aggregation's store), as a named grouping does in Kafka
        Streams (KAFKA-7758)."""
        if self._input_stream is None:
            self._input_stream = self._builder._repartitioned(self._stream, self._name or store)
        return self._input_stream

    def _aggregate(self, store: str, operator: StreamAggregation, value_serde: Serde) -> KTable:
        from worker.dsl.table import KTable

        stream = self._input(store)
        builder = self._builder
        builder._add_store(store, stream.key_serde, value_serde)
        node = builder._processor(
            "KSTREAM-AGGREGATE", operator.process, [stream.node], None, [store]
        )
        return KTable(builder, node, stream.key_serde, value_serde, store)


class WindowedKStream:
    """A grouped stream cut into windows; each aggregation is a windowed store ``name``."""

    def __init__(self, grouped: KGroupedStream, windows: Windows) -> None:
        self._grouped = grouped
        self._windows = windows

    def count(self, *, name: str | None = None, emit: str = "update") -> KTable:
        """Records per key and window."""
        return self._aggregate(_zero, _count, _sum if self._sessions else None, name, emit, JSON)

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        emit: str = "update",
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and window (sessions merge with it too)."""

        def fold(key: Any, value: Any, aggregate: Any) -> Any:
            return value if aggregate is None else reducer(aggregate, value)

        def merge(key: Any, a: Any, b: Any) -> Any:
            return reducer(a, b)

        merger = merge if self._sessions else None
        value_serde = self._grouped._stream.value_serde
        return self._aggregate(_none, fold, merger, name, emit, value_serde)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        *,
        merger: Callable[[Any, Any, Any], Any] | None = None,
        name: str | None = None,
        emit: str = "update",
        value_serde: Serde = JSON,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` per key and window from ``initializer()``;
        session windows also need ``merger(key, a, b)``."""
        return self._aggregate(initializer, aggregator, merger, name, emit, value_serde)

    @property
    def _sessions(self) -> bool:
        return isinstance(self._windows, SessionWindows)

    def _aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any] | None,
        name: str | None,
        emit: str,
        value_serde: Serde,
    ) -> KTable:
        from worker.dsl.plan import Compilation
        from worker.dsl.table import KTable

        grouped = self._grouped
        builder = grouped._builder
        store = builder._plan.name("KSTREAM-AGGREGATE-STATE-STORE", name)
        stream = grouped._input(store)
        windows, key_serde, parent = self._windows, stream.key_serde, stream.node
        if emit not in ("update", "final"):
            raise TopologyError(f"aggregation {store!r}: emit must be 'update' or 'final'")

        def write(c: Compilation) -> None:
            c.topology.add_windowed_aggregation(
                store,
                [parent],
                windows,
                initializer=initializer,
                aggregator=aggregator,
                merger=merger,
                emit=emit,
                key_serde=key_serde,
                value_serde=value_serde,
            )

        builder._plan.add("windowed aggregation", store, write)
        return KTable(builder, store, key_serde, value_serde, store, windowed=True)


def _zero() -> int:
    return 0


def _none() -> None:
    return None


def _count(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1


def _sum(key: Any, a: int, b: int) -> int:
    return a + b
