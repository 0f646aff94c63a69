"""Grouped-stream aggregations (count, reduce, aggregate): the processor behind the DSL's
``KGroupedStream`` operations.

A stream aggregation only ever adds: each record folds into its key's aggregate, kept in
a key-value store named after the aggregation (its changelog makes it survive restarts and
moves, and the HTTP query API serves it by that name). The new aggregate is forwarded at
once, so the result is a table whose every update downstream sees (no cache collapses
updates between commits: tests and docs can count on one output per input).

Records with a None key or a None value are skipped, as Kafka Streams' aggregations do:
a None key has no group and a None value is not a fact to fold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.errors import TopologyError
from worker.processing.context import ProcessorContext

Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]  # (key, value, aggregate) -> aggregate
Reducer = Callable[[Any, Any], Any]  # (aggregate, value) -> aggregate


class StreamAggregation:
    """``aggregator(key, value, aggregate)`` folds each record into the aggregate of its
    key in store ``store``, which starts as ``initializer()``; forwards ``(key, new)``."""

    __slots__ = ("store", "initializer", "aggregator")

    def __init__(self, store: str, initializer: Initializer, aggregator: Aggregator) -> None:
        if not callable(initializer) or not callable(aggregator):
            raise TopologyError(
                f"aggregation {store!r}: initializer and aggregator must be callable"
            )
        self.store = store
        self.initializer = initializer
        self.aggregator = aggregator

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        if key is None or value is None:
            return
        store = ctx.store(self.store)
        current = store.get(key)
        if current is None:
            current = self.initializer()
        new = self.aggregator(key, value, current)
        store.put(key, new)
        ctx.forward(key, new)


class StreamCount(StreamAggregation):
    """The number of records per key: the aggregation with its fold inlined (a count is
    the DSL's most common aggregation; no initializer or aggregator call per record)."""

    __slots__ = ()

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        if key is None or value is None:
            return
        store = ctx.store(self.store)
        n = store.get(key)
        n = 1 if n is None else n + 1
        store.put(key, n)
        ctx.forward(key, n)


def counting(store: str) -> StreamAggregation:
    """The number of records per key."""
    return StreamCount(store, _zero, _plus_one)


def reducing(store: str, reducer: Reducer) -> StreamAggregation:
    """``reducer(aggregate, value)`` per key; the first record of a key is its aggregate."""
    if not callable(reducer):
        raise TopologyError(f"aggregation {store!r}: the reducer must be callable")

    def fold(key: Any, value: Any, aggregate: Any) -> Any:
        return value if aggregate is None else reducer(aggregate, value)

    return StreamAggregation(store, _none, fold)


def _zero() -> int:
    return 0


def _none() -> None:
    return None


def _plus_one(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1
