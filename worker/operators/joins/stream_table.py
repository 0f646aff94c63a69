"""Stream-table joins: each stream record joined with the table's value for its key.

Semantics (Kafka Streams' KStream-KTable join, dsl-and-joins.md §3.2):

| | table has the key | table lacks it (or deleted it) |
|---|---|---|
| inner | ``joiner(v, t)`` | nothing |
| left | ``joiner(v, t)`` | ``joiner(v, None)`` |

* Only stream records trigger output; table updates only change the table.
* The lookup is the table's **latest** value for a plain table (``Topology.add_table``)
  and the value **as of the stream record's timestamp** for a versioned one
  (``tables.add_versioned_table``): the version written at or before it, so late table
  updates and out-of-order stream records give what in-order data gives. A stream record
  older than the table's history finds nothing (inner: dropped; left: ``None``).
* A stream record with a null value never joins (null means "no record"); one with a
  null key is dropped by an inner join and joined with ``None`` by a left join
  (KIP-962). The output keeps the stream record's key, timestamp and headers.
* ``key_mapper(key, value)`` picks the table key instead of the record's key (global
  tables, which need no co-partitioning); a mapped ``None`` counts as a miss
  (KAFKA-19208's fix: left joins still emit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.errors import TopologyError
from worker.operators.joins.kinds import Joiner
from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology
from worker.processing.versioned_views import VersionedKeyValueStore

KeyMapper = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class StreamTableJoin:
    """The join's processor: ``process`` runs for each stream record (see the module
    doc). ``table`` is the store of the table (plain or versioned)."""

    table: str
    joiner: Joiner
    left: bool = False
    key_mapper: KeyMapper | None = None

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        if value is None:
            return
        lookup = key if self.key_mapper is None else self.key_mapper(key, value)
        other = None if lookup is None else self._lookup(ctx, lookup)
        if other is None and not self.left:
            return
        ctx.forward(key, self.joiner(value, other))

    def _lookup(self, ctx: ProcessorContext, key: Any) -> Any:
        store = ctx.store(self.table)
        if isinstance(store, VersionedKeyValueStore):
            return store.get_as_of(key, ctx.timestamp)
        return store.get(key)


def add_stream_table_join(
    topology: Topology,
    name: str,
    stream: str,
    table: str,
    joiner: Joiner,
    *,
    left: bool = False,
    key_mapper: KeyMapper | None = None,
) -> Topology:
    """Processor ``name`` joining the records of node ``stream`` with table store
    ``table`` (inner, or ``left``); its children receive the joined records.

    Raises:
        TopologyError: ``joiner`` (or ``key_mapper``) is not callable; as
            ``Topology.add_processor``.
    """
    if not callable(joiner) or (key_mapper is not None and not callable(key_mapper)):
        raise TopologyError(f"join {name!r}: joiner and key_mapper must be callable")
    join = StreamTableJoin(table, joiner, left, key_mapper)
    return topology.add_processor(name, join.process, [stream], [table])
