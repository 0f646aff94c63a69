"""Versioned tables: a topic read into a versioned store, whose in-order changes flow on.

``builder.table(topic, history_ms=...)`` compiles to this (Kafka Streams' KIP-914
semantics): every record of the topic becomes a version of its key at the record's
timestamp (a null value: a tombstone version), so a stream-table join can read the
table as of a stream record's time. Unlike a plain table (``Topology.add_table``), whose
topic is also its changelog, a versioned store has a changelog of its own: a restore
needs each version's time, which the topic's records carry only as their timestamps and
a restore does not see.

Only changes that become the key's newest version are forwarded to the table's children
(table-table joins, aggregations): an out-of-order update is history, kept for as-of
reads, and must not overwrite a newer result downstream (KIP-914). A record older than
the history is rejected by the store and dropped.
"""

from __future__ import annotations

from typing import Any

from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology
from worker.serde import BYTES, Serde


def table_node(name: str) -> str:
    """The processor that writes versioned table ``name`` and forwards its changes:
    the parent to give the table's children."""
    return f"{name}-table"


def source_node(name: str) -> str:
    """The source that reads versioned table ``name``'s topic."""
    return f"{name}-source"


def write_version(ctx: ProcessorContext, store: str, key: Any, value: Any) -> None:
    """Write ``value`` as ``key``'s version at the record's time; forward it when it is
    the newest (null keys cannot address a table row: dropped, as Kafka Streams does)."""
    if key is None:
        return
    if ctx.versioned_store(store).put(key, value) == "latest":
        ctx.forward(key, value)


def add_versioned_table(
    topology: Topology,
    name: str,
    topic: str,
    history_ms: int,
    *,
    key_serde: Serde = BYTES,
    value_serde: Serde = BYTES,
) -> Topology:
    """Table ``name`` from ``topic``, versioned with ``history_ms`` of history: a source
    ``<name>-source``, the versioned store ``name`` and the processor
    :func:`table_node` that writes it.

    Raises:
        TopologyError: a bad ``history_ms``, a taken name, a topic already read.
    """

    def write(ctx: ProcessorContext, key: Any, value: Any) -> None:
        write_version(ctx, name, key, value)

    source = source_node(name)
    topology.add_source(source, topic, key_serde, value_serde)
    topology.add_versioned_store(name, history_ms, key_serde=key_serde, value_serde=value_serde)
    return topology.add_processor(table_node(name), write, [source], [name])
