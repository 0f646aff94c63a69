"""Stream-stream joins in windows: inner, left and outer, without spurious results.

Semantics (Kafka Streams' KStream-KStream join, dsl-and-joins.md §3.1, with
``JoinWindows(before_ms, after_ms, grace_ms)``):

* A left record at ``t`` joins every right record of its key with a time in
  ``[t - before, t + after]``; a right record at ``t`` every left one in
  ``[t - after, t + before]`` (bounds inclusive). Each arrival joins all the matches the
  other side holds, so one record may give several outputs; an output's timestamp is
  the later of the pair's.
* **Stream time** ``S`` is the largest time either side has seen (each side's buffer
  keeps its own in its store, so it survives restarts and moves). A record older than
  ``S - grace`` when it arrives is **late**: dropped, counted (``worker_late_records``
  with the join's left buffer as processor), never joined. Accepting it could join a
  record whose unmatched result was already out.
* **Unmatched results (left, outer) only when final** (KAFKA-10847): a record that
  found no partner on arrival is parked in the ``<name>-outer-store``, keyed by the
  time its window closes (``t + after + grace`` for a left record, ``t + before +
  grace`` for a right one) and removed when a partner arrives. Once ``S`` passes that
  time no accepted record can match it any more, and ``joiner(v, None)`` (left) or
  ``joiner(None, v)`` (right, outer joins) is forwarded with the record's timestamp:
  never early, never twice, and never for a record that matched. Parked results leave
  in the order their windows close; without new input ``S`` stands still and they wait
  (Kafka Streams' behaviour too).
* A null value never joins; a null key is dropped by an inner join and joined with
  ``None`` at once on a side that emits unmatched results (KIP-962).

Both sides are buffered in join buffers (``worker/state/join_buffer.py``) retaining
``before + after + grace``; the parked results in a key-value store. All three commit
with the task in its atomic batches and have changelogs, so a restart or a restore
resumes the join exactly.
"""

from __future__ import annotations

import struct
from typing import Any

from worker.clock import MAX_TIME_MS
from worker.operators.joins.kinds import Joiner, Kind, check_join
from worker.processing.context import ProcessorContext
from worker.processing.join_windows import JoinBufferView, JoinWindows
from worker.processing.store_views import KeyValueStore
from worker.processing.topology import Topology
from worker.serde import BYTES, Codec, Serde, SerdeError
from worker.state.contracts import Buffered

LEFT, RIGHT = 0, 1
_PARKED_KEY = struct.Struct(">QBQ")  # close time, side, sequence number
_PARKED_HEAD = struct.Struct(">QI")  # record time, key length


def store_names(name: str) -> tuple[str, str, str]:
    """The left buffer, right buffer and parked-results stores of join ``name``."""
    return f"{name}-left-store", f"{name}-right-store", f"{name}-outer-store"


def result_parents(name: str) -> list[str]:
    """The processors that forward join ``name``'s results."""
    return [f"{name}-left", f"{name}-right"]


class StreamStreamJoin:
    """The join's processors (see the module doc): :meth:`process_left` and
    :meth:`process_right` run for each record of their side; :meth:`init` when a task
    starts running them.

    The only state outside the stores is, per task, a lower bound of the earliest
    parked close time (``_due``), so most records skip the scan of parked results; it
    is reset whenever a task starts running the join, as the stores may have changed
    under it (a restore, a revival).
    """

    def __init__(
        self,
        name: str,
        windows: JoinWindows,
        kind: Kind,
        joiner: Joiner,
        key_serde: Serde,
        value_serdes: tuple[Serde, Serde],
    ) -> None:
        self.name = name
        self.windows = windows
        self.kind = kind
        self.joiner = joiner
        self.stores = store_names(name)
        self._keys = Codec(key_serde, kept=True)
        self._values = (Codec(value_serdes[0], kept=True), Codec(value_serdes[1], kept=True))
        self._lookahead = (windows.after_ms, windows.before_ms)
        self._parks = (kind != "inner", kind == "outer")
        self._due: dict[str, int] = {}

    def init(self, ctx: ProcessorContext) -> None:
        self._due[ctx.task_id] = 0

    def process_left(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        self._process(ctx, LEFT, key, value)

    def process_right(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        self._process(ctx, RIGHT, key, value)

    def _join(self, side: int, value: Any, other: Any) -> Any:
        return self.joiner(value, other) if side == LEFT else self.joiner(other, value)

    def _process(self, ctx: ProcessorContext, side: int, key: Any, value: Any) -> None:
        """Steps: 1. skip null values, join null keys with None (or drop); 2. drop a
        late record; 3. buffer it; 4. join it with every match, unparking those
        matches; 5. park it if it matched nothing and its side emits unmatched
        results; 6. emit the parked results whose windows have closed."""
        if value is None:
            return
        if key is None:
            if self._parks[side]:
                ctx.forward(None, self._join(side, value, None))
            return
        this: JoinBufferView = ctx.store(self.stores[side])  # type: ignore[assignment]
        other: JoinBufferView = ctx.store(self.stores[1 - side])  # type: ignore[assignment]
        ts = ctx.timestamp
        stream_time = max(this.observed_ms, other.observed_ms)
        key_bytes = _encoded(self._keys, key)
        if ts < stream_time - self.windows.grace_ms:
            this.late_record(ctx.partition, key_bytes, stream_time - ts)
            return
        value_bytes = _encoded(self._values[side], value)
        seq = this.raw.append(key_bytes, ts, value_bytes)
        if seq is None:  # past the buffer's retention: later than grace, counted there
            return
        before, after = self.windows.before_ms, self.windows.after_ms
        lo, hi = (ts - before, ts + after) if side == LEFT else (ts - after, ts + before)
        matches = other.raw.fetch(key_bytes, lo, hi)
        parked = ctx.store(self.stores[2]) if self._parks[0] else None
        for match in matches:
            if parked is not None and self._parks[1 - side]:
                self._unpark(parked, 1 - side, match)
            joined = self._join(side, value, self._values[1 - side].decode(match.value))
            ctx.forward(key, joined, timestamp=max(ts, match.ts_ms))
        if parked is None:
            return
        if not matches and self._parks[side]:
            close = self._close(side, ts)
            parked.put(_PARKED_KEY.pack(close, side, seq), _park(ts, key_bytes, value_bytes))
            self._due[ctx.task_id] = min(self._due.get(ctx.task_id, 0), close)
        self._emit_closed(ctx, parked, max(stream_time, ts))

    def _close(self, side: int, ts: int) -> int:
        return min(ts + self._lookahead[side] + self.windows.grace_ms, MAX_TIME_MS)

    def _unpark(self, parked: KeyValueStore, side: int, match: Buffered) -> None:
        entry = _PARKED_KEY.pack(self._close(side, match.ts_ms), side, match.seq)
        if parked.get(entry) is not None:
            parked.delete(entry)

    def _emit_closed(self, ctx: ProcessorContext, parked: KeyValueStore, stream_time: int) -> None:
        """Forward and delete every parked result whose window closed before
        ``stream_time``, in close order; remember the next close time."""
        if self._due.get(ctx.task_id, 0) >= stream_time:
            return
        due: list[tuple[bytes, bytes]] = []
        next_close = MAX_TIME_MS
        with parked.range() as entries:
            for entry, stored in entries:
                close = _PARKED_KEY.unpack(entry)[0]
                if close >= stream_time:
                    next_close = close
                    break
                due.append((entry, stored))
        self._due[ctx.task_id] = next_close
        for entry, stored in due:
            side = _PARKED_KEY.unpack(entry)[1]
            ts, key_bytes, value_bytes = _unpark_value(stored)
            parked.delete(entry)
            value = self._values[side].decode(value_bytes)
            key = self._keys.decode(key_bytes)
            ctx.forward(key, self._join(side, value, None), timestamp=ts)


def _encoded(codec: Codec, obj: Any) -> bytes:
    """Raises SerdeError: ``obj`` encodes to nothing (the buffers need bytes)."""
    data = codec.encode(obj)
    if data is None:
        raise SerdeError(f"{obj!r} encodes to nothing: a join cannot buffer it")
    return data


def _park(ts: int, key: bytes, value: bytes) -> bytes:
    return _PARKED_HEAD.pack(ts, len(key)) + key + value


def _unpark_value(stored: bytes) -> tuple[int, bytes, bytes]:
    ts, key_length = _PARKED_HEAD.unpack_from(stored, 0)
    start = _PARKED_HEAD.size
    return ts, stored[start : start + key_length], stored[start + key_length :]


def add_stream_stream_join(
    topology: Topology,
    name: str,
    left: str,
    right: str,
    windows: JoinWindows,
    joiner: Joiner,
    *,
    kind: Kind = "inner",
    key_serde: Serde,
    left_serde: Serde,
    right_serde: Serde,
) -> Topology:
    """Join the records of node ``left`` with those of node ``right`` in ``windows``.

    Adds the stores of :func:`store_names` (the parked-results store for left and outer
    joins only) and processors ``<name>-left`` and ``<name>-right``, whose children
    receive the results (:func:`result_parents`).

    Raises:
        TopologyError: an unknown kind, a joiner that is not callable; as
            ``Topology.add_processor``.
    """
    check_join(name, kind, joiner)
    join = StreamStreamJoin(name, windows, kind, joiner, key_serde, (left_serde, right_serde))
    left_store, right_store, outer_store = join.stores
    topology.add_join_buffer_store(left_store, windows, key_serde=key_serde, value_serde=left_serde)
    topology.add_join_buffer_store(
        right_store, windows, key_serde=key_serde, value_serde=right_serde
    )
    stores = [left_store, right_store]
    if kind != "inner":
        topology.add_store(outer_store, BYTES, BYTES)
        stores.append(outer_store)
    topology.add_processor(f"{name}-left", join.process_left, [left], stores, init=join.init)
    return topology.add_processor(
        f"{name}-right", join.process_right, [right], stores, init=join.init
    )
