"""One task's instance of a sub-topology: source topic in, processors, stores, sinks out.

Built once per task; the per-record path is a dict lookup by topic, a size check, two
deserialisations and direct calls down the graph, with no allocation beyond what the
user's code does. Bad input leaves that path only when it happens: the ``try`` around
the deserialisation costs nothing until something raises.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Protocol

from worker.errors import TopologyError
from worker.processing.context import Dispatch, KeyValueStore, ProcessorContext, RawStore
from worker.processing.handlers import BadRecord, RecordErrorHandler
from worker.processing.topology import ProcessorNode, SinkNode, SourceNode, Subtopology


class RecordSink(Protocol):
    """Where sink nodes write (the task's record collector)."""

    def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None
    ) -> None: ...


class TaskGraph:
    """Routes one input record through the sub-topology for a given task.

    ``errors`` decides about records that do not deserialise or are over its
    ``max_record_bytes``; without one, their SerdeError propagates to the caller.
    """

    def __init__(
        self,
        subtopology: Subtopology,
        task_id: str,
        stores: Mapping[str, RawStore],
        sink: RecordSink,
        errors: RecordErrorHandler | None = None,
    ) -> None:
        missing = {s.name for s in subtopology.stores} - set(stores)
        if missing:
            raise TopologyError(f"task {task_id}: stores not open: {sorted(missing)}")
        self._raw = dict(stores)
        views = {
            spec.name: KeyValueStore(
                spec.name, stores[spec.name], spec.key_serde, spec.value_serde, spec.is_table
            )
            for spec in subtopology.stores
        }
        self.context = ProcessorContext(task_id, views)
        self._sources: dict[str, SourceNode] = {s.topic: s for s in subtopology.sources}
        dispatch: dict[str, Dispatch] = {}
        for proc in subtopology.processors:
            dispatch[proc.name] = self._processor_dispatch(proc)
        for sink_node in subtopology.sinks:
            dispatch[sink_node.name] = self._sink_dispatch(sink_node, sink)
        children = {
            parent: tuple((name, dispatch[name]) for name in names)
            for parent, names in subtopology.children.items()
        }
        allowed = {p.name: frozenset(p.stores) for p in subtopology.processors}
        self.context.wire(allowed, children)
        self._has_children = {s.name: s.name in children for s in subtopology.sources}
        self._errors = errors
        bound = -1 if errors is None else errors.max_record_bytes
        self._max_bytes = sys.maxsize if bound < 0 else bound

    def _processor_dispatch(self, proc: ProcessorNode) -> Dispatch:
        fn, ctx = proc.fn, self.context

        def run(key: Any, value: Any) -> None:
            fn(ctx, key, value)

        return run

    @staticmethod
    def _sink_dispatch(node: SinkNode, sink: RecordSink) -> Dispatch:
        topic, kser, vser, send = node.topic, node.key_serde, node.value_serde, sink.send

        def write(key: Any, value: Any) -> None:
            send(topic, kser.serialize(key), vser.serialize(value))

        return write

    def process(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
    ) -> None:
        """Run one input record.

        A record over the size bound, or whose key or value does not deserialise, goes to
        the error handler: ``fail`` raises RecordFailed, the other policies skip it and
        return. An error raised by a processor or a sink propagates unchanged: the task
        manager retries the record and applies the processing policy.
        """
        source = self._sources[topic]
        ctx = self.context
        ctx.topic, ctx.partition, ctx.offset, ctx.timestamp, ctx.headers = (
            topic,
            partition,
            offset,
            timestamp,
            headers,
        )
        if (len(key) if key else 0) + (len(value) if value else 0) > self._max_bytes:
            bad = BadRecord(topic, partition, offset, timestamp, key, value, headers)
            self._errors.too_large(bad)  # type: ignore[union-attr]
            return
        if source.table_store is not None:
            if key is None:
                return  # a table cannot hold a null key; Kafka Streams drops these records
            self._upsert(source, key, value)
            if not self._has_children[source.name]:
                return
        try:
            key_obj = source.key_serde.deserialize(key)
            value_obj = source.value_serde.deserialize(value)
        except Exception as exc:
            if self._errors is None:
                raise
            bad = BadRecord(topic, partition, offset, timestamp, key, value, headers)
            self._errors.deserialization_failed(bad, exc)
            return
        ctx.enter(source.name)
        ctx.forward(key_obj, value_obj)

    def _upsert(self, source: SourceNode, key: bytes, value: bytes | None) -> None:
        store = self._raw[source.table_store]  # type: ignore[index]
        if value is None:
            store.delete(key)
        else:
            store.put(key, value)
