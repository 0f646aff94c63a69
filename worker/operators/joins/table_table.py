"""Table-table joins on the primary key: a table of joined rows, updated from both sides.

Semantics (Kafka Streams' KTable-KTable join, dsl-and-joins.md §3.4), as a function of
the two current rows ``l`` and ``r`` of a key, recomputed on every update of either:

| | both rows | only ``l`` | only ``r`` | neither |
|---|---|---|---|---|
| inner | ``joiner(l, r)`` | none | none | none |
| left | ``joiner(l, r)`` | ``joiner(l, None)`` | none | none |
| outer | ``joiner(l, r)`` | ``joiner(l, None)`` | ``joiner(None, r)`` | none |

A row is forwarded (key, joined value) whenever the result has one; when it has none, a
tombstone (key, None) is forwarded only if the result row existed, so deletes propagate
exactly once. The result is materialized in the key-value store ``name`` (its own
changelog, queryable) that decides "existed". Both inputs are tables whose stores the
join reads (``Topology.add_table``, or versioned tables, whose children hear only their
in-order changes); their changes reach the join as records forwarded by their sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.operators.joins.kinds import Joiner, Kind, check_join
from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology
from worker.serde import BYTES, Serde


def joined(kind: Kind, joiner: Joiner, left: Any, right: Any) -> Any:
    """The result row of one key from its two rows (None: no row), as the table says."""
    if left is None and (right is None or kind != "outer"):
        return None
    if right is None and kind == "inner":
        return None
    return joiner(left, right)


@dataclass(frozen=True, slots=True)
class TableTableJoin:
    """The join's two processors: :meth:`left_changed` and :meth:`right_changed` run for
    each change of their table, with the table's store already updated."""

    name: str
    left_table: str
    right_table: str
    kind: Kind
    joiner: Joiner

    def left_changed(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        self._update(ctx, key, value, self._row(ctx, self.right_table, key))

    def right_changed(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        self._update(ctx, key, self._row(ctx, self.left_table, key), value)

    @staticmethod
    def _row(ctx: ProcessorContext, table: str, key: Any) -> Any:
        return ctx.store(table).get(key)

    def _update(self, ctx: ProcessorContext, key: Any, left: Any, right: Any) -> None:
        if key is None:
            return
        update_result(ctx, self.name, key, joined(self.kind, self.joiner, left, right))


def update_result(ctx: ProcessorContext, store_name: str, key: Any, result: Any) -> None:
    """Make ``result`` (None: no row) ``key``'s row of the result table in store
    ``store_name`` and forward it; a tombstone only if the row existed, so deletes
    propagate exactly once."""
    store = ctx.store(store_name)
    if result is None:
        if store.get(key) is None:
            return
        store.delete(key)
    else:
        store.put(key, result)
    ctx.forward(key, result)


def add_table_table_join(
    topology: Topology,
    name: str,
    left: tuple[str, str],
    right: tuple[str, str],
    joiner: Joiner,
    *,
    kind: Kind = "inner",
    key_serde: Serde = BYTES,
    value_serde: Serde = BYTES,
) -> Topology:
    """Join two tables, each given as ``(node forwarding its changes, its store)``.

    Adds the result store ``name`` (``key_serde``, ``value_serde`` of the joined
    values) and processors ``<name>-left`` and ``<name>-right``, whose children receive
    the result table's changes; give both as parents of what follows (or use
    :func:`result_parents`).

    Raises:
        TopologyError: as :func:`~worker.operators.joins.kinds.check_join` and
            ``Topology.add_processor``.
    """
    check_join(name, kind, joiner)
    join = TableTableJoin(name, left[1], right[1], kind, joiner)
    topology.add_store(name, key_serde, value_serde)
    stores = [left[1], right[1], name]
    topology.add_processor(f"{name}-left", join.left_changed, [left[0]], stores)
    return topology.add_processor(f"{name}-right", join.right_changed, [right[0]], stores)


def result_parents(name: str) -> list[str]:
    """The nodes that forward table-table join ``name``'s result changes."""
    return [f"{name}-left", f"{name}-right"]
