"""A partition as a Kafka ``read_committed`` consumer sees it, decided from the log itself.

Kafka hides an aborted transaction's records from ``read_committed`` readers: the broker
lists the aborted transactions in every fetch response and the client drops their
batches. The test broker (Tansu 0.6.0) always sends an empty list, so every aborted
record a producer got into the log is shown to ``read_committed`` consumers once the
abort marker is written (docs/platform-notes.md). Exactly-once tests must not count
those as output, so they read through this module: it fetches the raw record batches
(Fetch v4, read_uncommitted, one partition at a time) and applies the transaction
markers the way Kafka does. A transactional batch belongs to its producer's open
transaction until that producer's next marker: COMMIT keeps it, ABORT drops it, no
marker yet (still open) hides it. Non-transactional records are always kept.

Test-only code. The worker never reads this way: on Kafka the broker does it.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

_FETCH, _VERSION = 1, 4
_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class LogRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    # When a read_committed reader could first see it (ms): the timestamp of the COMMIT
    # marker that ended its transaction, or its own for a non-transactional record.
    visible_at: int = 0
    producer_id: int = -1  # the producer that wrote it (-1: no idempotent producer)


# UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER: Kafka answers
# these for a topic created a moment ago, until its partitions' leaders are in place.
_NOT_LED_YET = {3, 5, 6}


class _NotLedYet(AssertionError):
    """A fetch the broker cannot answer yet; retried until the read's deadline."""


def _batches(
    bootstrap: str, topic: str, partition: int, timeout: float
) -> Iterator[DefaultRecordBatch]:
    """Every record batch of the partition from its start to its high watermark."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        offset, correlation = 0, 0
        deadline = time.monotonic() + timeout
        while True:
            correlation += 1
            try:
                high_watermark, batches = _fetch(sock, correlation, topic, partition, offset)
            except _NotLedYet:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)  # the retry's backoff, bounded by ``deadline``
                continue
            for batch in batches:
                offset = max(offset, batch.base_offset + batch.last_offset_delta + 1)
                yield batch
            if offset >= high_watermark or not batches:
                break


def read_committed_partition(
    bootstrap: str, topic: str, partition: int, timeout: float = 30.0
) -> list[LogRecord]:
    """Every committed record of the partition, in offset order (see the module doc)."""
    kept: list[LogRecord] = []
    pending: dict[int, list[LogRecord]] = {}
    for batch in _batches(bootstrap, topic, partition, timeout):
        if batch.is_control_batch:
            for marker in batch:
                records = pending.pop(batch.producer_id, [])
                if marker.commit:  # type: ignore[attr-defined]
                    stamp = batch.max_timestamp
                    kept.extend(replace(r, visible_at=stamp) for r in records)
            continue
        records = [
            LogRecord(
                r.offset,
                r.timestamp,
                r.key,
                r.value,
                tuple(r.headers),
                r.timestamp,
                batch.producer_id,
            )
            for r in batch
        ]
        if batch.is_transactional:
            pending.setdefault(batch.producer_id, []).extend(records)
        else:
            kept.extend(records)
    return sorted(kept, key=lambda r: r.offset)


def aborts(bootstrap: str, topic: str, partition: int, timeout: float = 30.0) -> dict[int, int]:
    """Producer id -> the time (ms, the marker's timestamp) of its latest aborted
    transaction that had written records to the partition."""
    found: dict[int, int] = {}
    wrote: set[int] = set()
    for batch in _batches(bootstrap, topic, partition, timeout):
        if not batch.is_control_batch:
            if batch.is_transactional:
                wrote.add(batch.producer_id)
            continue
        for marker in batch:
            if not marker.commit and batch.producer_id in wrote:  # type: ignore[attr-defined]
                found[batch.producer_id] = batch.max_timestamp
            wrote.discard(batch.producer_id)
    return found


def read_committed_topic(
    bootstrap: str, topic: str, partitions: int, timeout: float = 30.0
) -> list[tuple[int, LogRecord]]:
    """(partition, record) for every committed record of the topic's partitions."""
    return [
        (p, r)
        for p in range(partitions)
        for r in read_committed_partition(bootstrap, topic, p, timeout)
    ]


def _fetch(
    sock: socket.socket, correlation: int, topic: str, partition: int, offset: int
) -> tuple[int, list[DefaultRecordBatch]]:
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 500, 1, _MAX_BYTES, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, _MAX_BYTES)
    client = b"test-log-reader"
    header = struct.pack(">hhih", _FETCH, _VERSION, correlation, len(client)) + client
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    response = _read_exact(sock, struct.unpack(">i", _read_exact(sock, 4))[0])
    reader = _Reader(response)
    if reader.int32() != correlation:
        raise AssertionError("fetch: response for another request")
    reader.int32()  # throttle time
    for _ in range(reader.int32()):  # topics
        reader.string()
        for _ in range(reader.int32()):  # partitions
            reader.int32()
            error = reader.int16()
            high_watermark = reader.int64()
            reader.int64()  # last stable offset
            aborted = reader.int32()
            reader.skip(max(aborted, 0) * 16)
            data = reader.bytes()
            if error in _NOT_LED_YET:
                raise _NotLedYet(f"fetch {topic}-{partition}@{offset}: error code {error}")
            if error:
                raise AssertionError(f"fetch {topic}-{partition}@{offset}: error code {error}")
            records = MemoryRecords(data)
            batches = []
            while records.has_next():
                batch = records.next_batch()
                if batch is None:
                    break
                batches.append(batch)
            return high_watermark, batches
    raise AssertionError(f"fetch {topic}-{partition}: no partition in the response")


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise AssertionError("fetch: connection closed by the broker")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def _unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def skip(self, size: int) -> None:
        self._pos += size

    def string(self) -> str:
        size = self.int16()
        value = self._data[self._pos : self._pos + size].decode()
        self._pos += size
        return value

    def bytes(self) -> bytes:
        size = self.int32()
        if size < 0:
            return b""
        value = self._data[self._pos : self._pos + size]
        self._pos += size
        return value


def high_watermark(
    bootstrap: str, topic: str, partition: int, known: int = 0, timeout: float = 10.0
) -> int:
    """The partition's end as the fetch path reports it, open transactions included.

    ``known``: an offset the partition is known to have reached (the fetch starts there).
    """
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        return _fetch(sock, 1, topic, partition, known)[0]
