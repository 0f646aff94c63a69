"""One task's instance of a sub-topology: source topic in, processors, stores, sinks out.

Built once per task. The per-record path (issues 8 and 14) is one closure per source,
fetched once per run of records from one partition (:meth:`TaskGraph.runner`) and called
with the consumer's own ``Message`` (it already has the methods of :class:`Record`): a
size check, the record's timestamp (its own, read once, unless a custom extractor is
configured) and the stream time set on the context, the two deserialisations as the C
functions behind the built-in serdes (inline, with everything but the common case handed
to ``worker.serde.Codec``), and direct calls down the graph, with no allocation beyond
what the user's code does. Record metadata (headers included) is read from the record
itself only when a processor or a sink asks for it. Bad
input leaves that path only when it happens: the ``try`` around the deserialisation
costs nothing until something raises.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast

from worker.errors import TopologyError
from worker.processing.built_topology import SinkNode, SourceNode, StoreSpec, Subtopology
from worker.processing.context import Node, ProcessorContext, Record, RecordSink
from worker.processing.handlers import BadRecord, RecordErrorHandler
from worker.processing.join_windows import JoinBufferView, JoinWindows
from worker.processing.store_views import KeyValueStore
from worker.processing.timestamps import (
    NEGATIVE,
    UNBOUNDED,
    FutureBound,
    InvalidTimestamp,
    TimestampExtractor,
    extract,
    record_time,
)
from worker.processing.ttl_views import TtlKeyValueStore
from worker.processing.versioned_views import VersionedKeyValueStore, versioned_view
from worker.processing.window_views import SessionStoreView, WindowStoreView
from worker.processing.windows import SessionWindows, SlidingWindows
from worker.serde import Codec
from worker.state.contracts import (
    RawJoinBuffer,
    RawKeyValueStore,
    RawSessionStore,
    RawTtlStore,
    RawWindowStore,
)

Runner = Callable[[Record], None]


def window_view(
    spec: StoreSpec, raw: RawKeyValueStore, context: ProcessorContext
) -> WindowStoreView | SessionStoreView | JoinBufferView:
    """What processors get for a windowed store: its writes happen at the current
    record's timestamp, read from ``context`` at each write."""

    def timestamp() -> int:
        return context.timestamp

    if isinstance(spec.windows, JoinWindows):
        return JoinBufferView(spec.name, cast(RawJoinBuffer, raw))  # a JoinBufferStore
    # the task opened the store from the spec: a SessionStore or a FixedWindowStore
    if isinstance(spec.windows, SessionWindows | SlidingWindows):
        sessions = cast(RawSessionStore, raw)
        return SessionStoreView(spec.name, sessions, spec.key_serde, spec.value_serde, timestamp)
    windows = cast(RawWindowStore, raw)
    return WindowStoreView(spec.name, windows, spec.key_serde, spec.value_serde, timestamp)


class TaskGraph:
    """Routes one input record through the sub-topology for a given task.

    ``errors`` decides about records that do not deserialise, are over its
    ``max_record_bytes`` or have an invalid timestamp; without one, their SerdeError
    (or InvalidTimestamp) propagates to the caller. ``extractor`` is a custom
    ``timestamp.extractor``; None (or the default, ``record_time``) reads the record's own
    timestamp inline. ``future`` bounds how far ahead of the wall clock a timestamp may be
    (``timestamp.max.future.ms``): a record beyond it is an invalid timestamp, and a
    forwarded timestamp beyond it a processing error, so neither stream time nor an
    operator's observed time nor TTL time ever passes it. None: no bound.
    """

    def __init__(
        self,
        subtopology: Subtopology,
        task_id: str,
        stores: Mapping[str, RawKeyValueStore],
        sink: RecordSink,
        errors: RecordErrorHandler | None = None,
        extractor: TimestampExtractor | None = None,
        future: FutureBound | None = None,
    ) -> None:
        specs = (*subtopology.stores, *subtopology.global_stores)
        missing = {s.name for s in specs} - set(stores)
        if missing:
            raise TopologyError(f"task {task_id}: stores not open: {sorted(missing)}")
        self._raw = dict(stores)
        self.context = ProcessorContext(task_id)
        self.context.future = self._future = future or UNBOUNDED
        views = {spec.name: self._view(spec, stores[spec.name]) for spec in specs}
        nodes: dict[str, Node] = {}
        for source in subtopology.sources:
            nodes[source.name] = Node(source.name, {})
        for proc in subtopology.processors:
            nodes[proc.name] = node = Node(proc.name, {name: views[name] for name in proc.stores})
            node.call = functools.partial(proc.fn, self.context)
        for sink_node in subtopology.sinks:
            nodes[sink_node.name] = node = Node(sink_node.name, {})
            node.call = self._sink_dispatch(sink_node, sink, self.context)
        for parent, names in subtopology.children.items():
            nodes[parent].children = tuple(nodes[name] for name in names)
        self.context.wire(nodes)
        self._errors = errors
        self._extractor = None if extractor is record_time else extractor
        bound = -1 if errors is None else errors.max_record_bytes
        self._max_bytes = sys.maxsize if bound < 0 else bound
        self._runners: dict[str, Runner] = {
            s.topic: self._source_runner(s, nodes[s.name]) for s in subtopology.sources
        }

    def _view(
        self, spec: StoreSpec, raw: RawKeyValueStore
    ) -> (
        KeyValueStore | WindowStoreView | SessionStoreView | VersionedKeyValueStore | JoinBufferView
    ):
        if spec.windows is not None:
            return window_view(spec, raw, self.context)
        if spec.history_ms is not None:
            return versioned_view(spec, raw, self.context)
        if spec.ttl_ms is None:
            return KeyValueStore(spec.name, raw, spec.key_serde, spec.value_serde, spec.is_table)
        timed = cast(RawTtlStore, raw)  # the task opens a TtlStore for a spec with a TTL
        return TtlKeyValueStore(spec.name, timed, spec.key_serde, spec.value_serde, self.context)

    def runner(self, topic: str) -> Runner:
        """The function that runs one record of ``topic`` through the graph; the task
        calls it for each record of a run.

        It sets the context's timestamp and stream time, deserialises the record
        and passes it down the graph. A record over the size bound, with an invalid
        timestamp, or whose key or value does not deserialise, goes to the error handler:
        ``fail`` raises RecordFailed, the other policies skip it and return. An error
        raised by a processor or a sink propagates unchanged: the router retries the
        record and applies the processing policy.
        """
        return self._runners[topic]

    def _source_runner(self, source: SourceNode, node: Node) -> Runner:
        ctx = self.context
        errors = self._errors
        extractor = self._extractor
        future = self._future
        max_bytes = self._max_bytes
        keys, values = Codec(source.key_serde), Codec(source.value_serde)
        decode_key, decode_value = keys.fast_decode, values.fast_decode
        children = node.children
        table = None if source.table_store is None else self._raw[source.table_store]

        def reject(record: Record, exc: InvalidTimestamp) -> None:
            if errors is None:
                raise exc
            errors.invalid_timestamp(BadRecord.of(record), exc)

        def run(record: Record) -> None:
            ctx.current_record = record
            key = record.key()
            value = record.value()
            if (len(key) if key else 0) + (len(value) if value else 0) > max_bytes:
                errors.too_large(BadRecord.of(record))  # type: ignore[union-attr]
                return
            if extractor is None:
                timestamp = record.timestamp()[1]
            else:
                try:
                    timestamp = extract(extractor, record, ctx.stream_time)
                except InvalidTimestamp as exc:
                    reject(record, exc)
                    return
            # One comparison for the common case: stream time is >= -1, so a timestamp
            # above it is valid; only one that is not needs the sign check. One that
            # would raise stream time is checked against the future bound (a cached
            # horizon: the clock is read only when a timestamp passes it).
            if timestamp > ctx.stream_time:
                if timestamp > future.horizon and not future.admits(timestamp):
                    reject(record, future.refusal(timestamp))
                    return
                ctx.stream_time = timestamp
            elif timestamp < 0:
                reject(record, InvalidTimestamp(timestamp, NEGATIVE))
                return
            ctx.timestamp = timestamp
            if table is not None:
                if key is None:
                    return  # a table cannot hold a null key; Kafka Streams drops these records
                if value is None:
                    table.delete(key)
                else:
                    table.put(key, value)
                if not children:
                    return
            try:
                key_obj = decode_key(key) if key is not None else keys.decode(None)
                value_obj = decode_value(value) if value is not None else values.decode(None)
            except Exception:
                # The codecs' rule: the serde's own error for the handler (or its result,
                # should the C function be stricter than the serde).
                try:
                    key_obj = keys.decode(key)
                    value_obj = values.decode(value)
                except Exception as exc:
                    if errors is None:
                        raise
                    errors.deserialization_failed(BadRecord.of(record), exc)
                    return
            for child in children:
                ctx.current_node = child
                child.call(key_obj, value_obj)

        return run

    @staticmethod
    def _sink_dispatch(
        node: SinkNode, sink: RecordSink, ctx: ProcessorContext
    ) -> Callable[[Any, Any], None]:
        """A sink node: the output encoded and sent with the context's timestamp and headers."""
        topic, send = node.topic, sink.send
        keys, values = Codec(node.key_serde), Codec(node.value_serde)
        encode_key, encode_value = keys.fast_encode, values.fast_encode

        def write(key: Any, value: Any) -> None:
            try:
                key_bytes = encode_key(key) if key is not None else keys.encode(None)
                value_bytes = encode_value(value) if value is not None else values.encode(None)
            except Exception:
                key_bytes = keys.encode(key)
                value_bytes = values.encode(value)
            send(topic, key_bytes, value_bytes, ctx.timestamp, ctx.headers)

        return write
