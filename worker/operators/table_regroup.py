"""Re-grouping a table by another key, and aggregating the groups with an adder and a
subtractor: the processors behind the DSL's ``KTable.group_by(...).aggregate(...)``.

Two halves, on either side of a repartition topic (Kafka Streams' ``KTableRepartitionMap``
and ``KTableAggregate``, reference dsl-and-joins.md §2.3):

:class:`TableRegroup`, on the table's side, maps each row through ``selector(key, value)``
to ``(group_key, group_value)``. To take a row's old contribution back out it needs the
row's previous value, which a table source does not hand its children (its store is
already written when they run). So the regroup keeps the last value it saw per row in a
store of its own (``<name>-prior``, changelog-backed like every store), and maps that
through the selector again: the selector must be deterministic, as in Kafka Streams.

- same group for the old and the new value: one record ``Change(new, old)`` (KIP-904: the
  aggregate moves in one update, never through a transient wrong value);
- another group: ``(old_group, Change(None, old))`` then ``(new_group, Change(new, None))``;
- a tombstone: ``(old_group, Change(None, old))`` and the prior value deleted;
- a selected key of None: that half is skipped (as Kafka Streams does).

:class:`TableAggregation`, on the group's side, applies the change to the group's
aggregate: subtractor with the old value first (when both it and an aggregate exist),
then, with a new value, the initializer when there is no aggregate and the adder. A
subtractor that returns None removes the group's row (a tombstone downstream) and the
next insert starts again from the initializer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.errors import TopologyError
from worker.operators.change import Change
from worker.processing.context import ProcessorContext

Selector = Callable[[Any, Any], tuple[Any, Any]]  # (key, value) -> (group key, group value)
Adder = Callable[[Any, Any, Any], Any]  # (group key, value, aggregate) -> aggregate


class TableRegroup:
    """Forward each row's change to its group(s); ``prior`` is the regroup's own store."""

    __slots__ = ("prior", "selector")

    def __init__(self, prior: str, selector: Selector) -> None:
        if not callable(selector):
            raise TopologyError(f"table group_by {prior!r}: the selector must be callable")
        self.prior = prior
        self.selector = selector

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        if key is None:
            return
        prior = ctx.store(self.prior)
        old_value = prior.get(key)
        old = None if old_value is None else self.selector(key, old_value)
        new = None if value is None else self.selector(key, value)
        if value is None:
            if old_value is not None:
                prior.delete(key)
        else:
            prior.put(key, value)
        if old is not None and new is not None and old[0] == new[0]:
            if old[0] is not None:
                ctx.forward(new[0], Change(new[1], old[1]))
            return
        if old is not None and old[0] is not None:
            ctx.forward(old[0], Change(None, old[1]))
        if new is not None and new[0] is not None:
            ctx.forward(new[0], Change(new[1], None))


class TableAggregation:
    """Apply each ``Change`` to its group's aggregate in store ``store`` (module doc)."""

    __slots__ = ("store", "initializer", "adder", "subtractor")

    def __init__(
        self, store: str, initializer: Callable[[], Any], adder: Adder, subtractor: Adder
    ) -> None:
        if not (callable(initializer) and callable(adder) and callable(subtractor)):
            raise TopologyError(
                f"table aggregation {store!r}: initializer, adder and subtractor must be callable"
            )
        self.store = store
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor

    def process(self, ctx: ProcessorContext, key: Any, change: Change) -> None:
        if key is None or change is None:
            return
        store = ctx.store(self.store)
        aggregate = store.get(key)
        if change.old is not None and aggregate is not None:
            aggregate = self.subtractor(key, change.old, aggregate)
        if change.new is not None:
            if aggregate is None:
                aggregate = self.initializer()
            aggregate = self.adder(key, change.new, aggregate)
        if aggregate is None:
            store.delete(key)
        else:
            store.put(key, aggregate)
        ctx.forward(key, aggregate)


def table_reducer(
    store: str, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any]
) -> TableAggregation:
    """``reduce(adder(aggregate, value), subtractor(aggregate, value))``: a group's first
    value is its aggregate (Kafka Streams' ``KTableReduce``)."""
    if not callable(adder) or not callable(subtractor):
        raise TopologyError(f"table reduce {store!r}: adder and subtractor must be callable")

    def add(key: Any, value: Any, aggregate: Any) -> Any:
        return value if aggregate is None else adder(aggregate, value)

    def subtract(key: Any, value: Any, aggregate: Any) -> Any:
        return subtractor(aggregate, value)

    return TableAggregation(store, _none, add, subtract)


def _none() -> None:
    return None
