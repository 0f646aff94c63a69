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
* ``grace_ms`` (versioned tables only, Kafka Streams' KIP-923): each stream record waits
  in a buffer (``grace_buffer.py``, store ``<name>-buffer``) until the buffer's stream
  time passes its timestamp plus the grace, then joins as of its timestamp; so a table
  version up to ``grace_ms`` late still matches, and outputs leave in timestamp order. A
  record already older than that joins at once. Released records lose their headers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.errors import TopologyError
from worker.operators.joins.grace_buffer import GraceBuffer
from worker.operators.joins.kinds import Joiner
from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology
from worker.processing.versioned_views import VersionedKeyValueStore
from worker.serde import BYTES, Codec, Serde, SerdeError

KeyMapper = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class StreamTableJoin:
    """The join's processor: ``process`` runs for each stream record (see the module
    doc). ``table`` is the store of the table (plain or versioned)."""

    table: str
    joiner: Joiner
    left: bool = False
    key_mapper: KeyMapper | None = None
    grace: Grace | None = None

    def process(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        if value is None:
            return
        grace = self.grace
        if grace is None or key is None:
            self._join(ctx, key, value, None)
            return
        buffer = GraceBuffer(ctx.store(grace.store))
        upto = max(buffer.observed_ms(), ctx.timestamp) - grace.grace_ms
        if ctx.timestamp < upto:  # already later than the grace: nothing to wait for
            self._join(ctx, key, value, None)
            return
        buffer.hold(_encoded(grace.keys, key), _encoded(grace.values, value), ctx.timestamp)
        for ts, key_bytes, value_bytes in buffer.release(upto):
            held = grace.keys.decode(key_bytes), grace.values.decode(value_bytes)
            self._join(ctx, *held, ts)

    def _join(self, ctx: ProcessorContext, key: Any, value: Any, held_at: int | None) -> None:
        """Join one record: the current one (``held_at`` None), or one the grace buffer
        released, with its own timestamp and no headers."""
        at = ctx.timestamp if held_at is None else held_at
        lookup = key if self.key_mapper is None else self.key_mapper(key, value)
        other = None if lookup is None else self._lookup(ctx, lookup, at)
        if other is None and not self.left:
            return
        if held_at is None:
            ctx.forward(key, self.joiner(value, other))
        else:
            ctx.forward(key, self.joiner(value, other), timestamp=held_at, headers=[])

    def _lookup(self, ctx: ProcessorContext, key: Any, at: int) -> Any:
        store = ctx.store(self.table)
        if isinstance(store, VersionedKeyValueStore):
            return store.get_as_of(key, at)
        return store.get(key)


def _keyed_lookup(join: StreamTableJoin) -> Callable[[ProcessorContext, Any, Any], None]:
    """``join.process`` for a join without a grace or a key mapper, with ``_join`` inline
    and its settings in the closure: a stream-table join's whole per-record cost over the
    lookup it replaces is this function and the table read (docs/benchmarks.md). A record
    without a key takes ``join.process``."""
    table, joiner, left, slow = join.table, join.joiner, join.left, join.process

    def process(ctx: ProcessorContext, key: Any, value: Any) -> None:
        if key is None or value is None:
            slow(ctx, key, value)
            return
        store = ctx.store(table)
        if isinstance(store, VersionedKeyValueStore):
            other = store.get_as_of(key, ctx.timestamp)
        else:
            other = store.get(key)
        if other is not None or left:
            ctx.forward(key, joiner(value, other))

    return process


@dataclass(frozen=True, slots=True)
class Grace:
    """A join's grace: how long records wait, in which store, with which serdes."""

    grace_ms: int
    store: str
    keys: Codec
    values: Codec


def _encoded(codec: Codec, obj: Any) -> bytes:
    """Raises SerdeError: ``obj`` encodes to nothing (the buffer needs bytes)."""
    data = codec.encode(obj)
    if data is None:
        raise SerdeError(f"{obj!r} encodes to nothing: a join cannot buffer it")
    return data


def add_stream_table_join(
    topology: Topology,
    name: str,
    stream: str,
    table: str,
    joiner: Joiner,
    *,
    left: bool = False,
    key_mapper: KeyMapper | None = None,
    grace_ms: int = 0,
    key_serde: Serde = BYTES,
    value_serde: Serde = BYTES,
) -> Topology:
    """Processor ``name`` joining the records of node ``stream`` with table store
    ``table`` (inner, or ``left``); its children receive the joined records. With
    ``grace_ms`` > 0 (a versioned table only) the stream's records wait in the store
    ``<name>-buffer``, encoded with ``key_serde`` and ``value_serde`` (the stream's).

    Raises:
        TopologyError: ``joiner`` (or ``key_mapper``) is not callable, a bad grace; as
            ``Topology.add_processor``.
    """
    if not callable(joiner) or (key_mapper is not None and not callable(key_mapper)):
        raise TopologyError(f"join {name!r}: joiner and key_mapper must be callable")
    if type(grace_ms) is not int or grace_ms < 0:
        raise TopologyError(f"join {name!r}: grace_ms must be an int >= 0, got {grace_ms!r}")
    stores = [table]
    grace = None
    if grace_ms:
        buffer = f"{name}-buffer"
        topology.add_store(buffer, BYTES, BYTES)
        stores.append(buffer)
        grace = Grace(grace_ms, buffer, Codec(key_serde), Codec(value_serde))
    join = StreamTableJoin(table, joiner, left, key_mapper, grace)
    plain = grace is None and key_mapper is None
    process = _keyed_lookup(join) if plain else join.process
    return topology.add_processor(name, process, [stream], stores)
