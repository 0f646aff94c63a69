"""Record time in the task graph: ctx.timestamp, headers and stream time, what outputs
carry, the timestamp extractor, and invalid timestamps through the bad-record policies.

The error handler is real; stores are in-memory fakes and the collector is the fake.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.fakes import DictStore, FakeCollector, SentRecord
from tests.support.feeding import feed
from worker.clock import FakeClock
from worker.observability import Metrics, get_logger
from worker.processing import ProcessorContext, Topology
from worker.processing.graph import TaskGraph
from worker.processing.handlers import (
    HEADER_PREFIX,
    ExceptionPolicy,
    RecordErrorHandler,
    RecordFailed,
)
from worker.processing.timestamps import (
    INVALID_TIMESTAMP,
    WALL_CLOCK,
    FutureBound,
    InvalidTimestamp,
    TimestampExtractor,
    decode_stream_time,
    encode_stream_time,
    record_time,
    resolve,
)
from worker.serde import JSON, STR

DLQ_TOPIC = "app-dlq"
TRACE = [("trace", b"abc")]


class World:
    """``in`` -> ``p`` (records what it sees, forwards by ``forward``) -> sink ``out``."""

    def __init__(
        self,
        forward: Any = None,
        extractor: TimestampExtractor | None = None,
        policy: ExceptionPolicy = ExceptionPolicy.FAIL,
        future: FutureBound | None = None,
    ) -> None:
        self.collector = FakeCollector()
        self.metrics = Metrics()
        self.seen: list[tuple[Any, int, Any, int]] = []  # key, timestamp, headers, stream time
        self.errors = RecordErrorHandler(
            "0_1",
            policy,
            policy,
            DLQ_TOPIC,
            self.collector,
            self.metrics,
            FakeClock(),
            get_logger(),
        )
        self.store = DictStore()

        def proc(ctx: ProcessorContext, key: Any, value: Any) -> None:
            self.seen.append((key, ctx.timestamp, ctx.headers, ctx.stream_time))
            ctx.store("s").put(key, value)
            (forward or ProcessorContext.forward)(ctx, key, value)

        (subtopology,) = (
            Topology()
            .add_source("in", "input", key_serde=STR, value_serde=JSON)
            .add_store("s", key_serde=STR, value_serde=JSON)
            .add_processor("p", proc, parents=["in"], stores=["s"])
            .add_sink("out", "output", parents=["p"], key_serde=STR, value_serde=JSON)
            .build()
            .subtopologies
        )
        self.graph = TaskGraph(
            subtopology, "0_1", {"s": self.store}, self.collector, self.errors, extractor, future
        )

    def send(self, key: str, timestamp: int, headers: Any = None, offset: int = 0) -> None:
        feed(self.graph, "input", 1, offset, timestamp, key.encode(), b"1", headers)

    @property
    def ctx(self) -> ProcessorContext:
        return self.graph.context

    def outputs(self) -> list[SentRecord]:
        return [r for r in self.collector.sent if r.topic == "output"]

    def skipped(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "worker_skipped_records_total", {"reason": reason}
        )
        return value or 0.0


# -- timestamps, headers and outputs ---------------------------------------------------


def test_processors_see_each_records_timestamp_and_headers() -> None:
    world = World()

    world.send("a", 1_000, TRACE)
    world.send("b", 2_000)

    assert world.seen == [("a", 1_000, TRACE, 1_000), ("b", 2_000, None, 2_000)]


def test_an_output_carries_its_inputs_timestamp_and_headers() -> None:
    world = World()

    world.send("a", 1_000, TRACE)
    world.send("b", 2_000)

    assert world.outputs() == [
        SentRecord("output", None, b"a", b"1", TRACE, None, 1_000),
        SentRecord("output", None, b"b", b"1", None, None, 2_000),
    ]


def test_forward_with_a_timestamp_and_headers_gives_them_to_the_output_only() -> None:
    mine = [("mine", b"1")]

    def forward(ctx: ProcessorContext, key: Any, value: Any) -> None:
        ctx.forward(key, value, timestamp=5, headers=mine)
        assert (ctx.timestamp, ctx.headers) == (1_000, TRACE), "the record's own come back"

    world = World(forward)

    world.send("a", 1_000, TRACE)

    assert world.outputs() == [SentRecord("output", None, b"a", b"1", mine, None, 5)]


def test_forward_with_a_timestamp_only_keeps_the_inputs_headers() -> None:
    world = World(lambda ctx, key, value: ctx.forward(key, value, timestamp=7))

    world.send("a", 1_000, TRACE)

    assert world.outputs() == [SentRecord("output", None, b"a", b"1", TRACE, None, 7)]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_forward_with_an_invalid_timestamp_is_refused(bad: Any) -> None:
    world = World(lambda ctx, key, value: ctx.forward(key, value, timestamp=bad))

    with pytest.raises(InvalidTimestamp):
        world.send("a", 1_000)
    assert world.outputs() == []
    assert world.ctx.timestamp == 1_000


# -- stream time -------------------------------------------------------------------------


def test_stream_time_is_the_largest_timestamp_processed_so_far() -> None:
    world = World()
    assert world.ctx.stream_time == -1

    for timestamp in (100, 50, 300, 200):
        world.send("k", timestamp)

    assert [stream for *_, stream in world.seen] == [100, 100, 300, 300]
    assert [timestamp for _, timestamp, *_ in world.seen] == [100, 50, 300, 200]


# -- the extractor -------------------------------------------------------------------------


def test_a_custom_extractor_gives_the_timestamp_and_sees_the_stream_time_before() -> None:
    calls: list[int] = []

    def from_header(record: Any, stream_time: int) -> int:
        calls.append(stream_time)
        return int(dict(record.headers())["ts"])

    world = World(extractor=from_header)

    world.send("a", 1, [("ts", b"500")])
    world.send("b", 1, [("ts", b"400")])

    assert [timestamp for _, timestamp, *_ in world.seen] == [500, 400]
    assert calls == [-1, 500]
    assert [r.timestamp for r in world.outputs()] == [500, 400]


def test_the_wall_clock_extractor_stamps_records_with_the_processing_time() -> None:
    before = time.time_ns() // 1_000_000
    world = World(extractor=resolve(WALL_CLOCK))

    world.send("a", 5)

    assert before <= world.seen[0][1] <= time.time_ns() // 1_000_000
    assert world.outputs()[0].timestamp == world.seen[0][1]


def test_the_default_extractor_is_the_records_own_timestamp() -> None:
    world = World(extractor=record_time)  # what timestamps.resolve("record") gives

    world.send("a", 123)

    assert world.seen[0][1] == 123


# -- invalid timestamps and the policies --------------------------------------------------


def raises(record: Any, stream_time: int) -> int:
    raise KeyError("no ts header")


def gives_a_float(record: Any, stream_time: int) -> int:
    return 1.5  # type: ignore[return-value]


@pytest.mark.parametrize(
    "extractor, timestamp, why",
    [
        (None, -1, "must be >= 0"),
        (raises, 1, "extractor raised KeyError"),
        (gives_a_float, 1, "int"),
    ],
)
def test_an_invalid_timestamp_under_fail_stops_naming_the_record_and_the_setting(
    extractor: Any, timestamp: int, why: str
) -> None:
    world = World(extractor=extractor)

    with pytest.raises(RecordFailed) as raised:
        world.send("a", timestamp, offset=9)

    message = str(raised.value)
    assert "input-1@9" in message and "invalid timestamp" in message and why in message
    assert "default.deserialization.exception.handler = fail" in message
    assert world.seen == [] and world.collector.sent == [] and world.store.data == {}


def test_an_invalid_timestamp_under_log_and_continue_is_skipped_and_counted() -> None:
    world = World(policy=ExceptionPolicy.LOG_AND_CONTINUE)

    world.send("a", -1, offset=1)
    world.send("b", 10, offset=2)

    assert [key for key, *_ in world.seen] == ["b"]
    assert world.skipped(INVALID_TIMESTAMP) == 1
    assert world.ctx.stream_time == 10


def test_an_invalid_timestamp_under_dead_letter_goes_to_the_dlq_with_the_reason() -> None:
    world = World(extractor=raises, policy=ExceptionPolicy.DEAD_LETTER)

    world.send("a", 1_000, TRACE, offset=4)

    (letter,) = [r for r in world.collector.sent if r.topic == DLQ_TOPIC]
    headers = dict(letter.headers)
    assert letter.key == b"a" and letter.value == b"1"
    assert headers["trace"] == b"abc"
    assert headers[HEADER_PREFIX + "reason"] == INVALID_TIMESTAMP.encode()
    assert headers[HEADER_PREFIX + "offset"] == b"4"
    assert letter.timestamp == 1_000, "the source record's own time, being valid"
    assert world.seen == [] and world.outputs() == []
    assert world.skipped(INVALID_TIMESTAMP) == 1


def test_a_negative_timestamp_is_dead_lettered_with_the_producers_clock() -> None:
    world = World(policy=ExceptionPolicy.DEAD_LETTER)

    world.send("a", -1)

    (letter,) = world.collector.sent
    assert letter.topic == DLQ_TOPIC and letter.timestamp == 0


# -- stream time as offset metadata -----------------------------------------------------


@pytest.mark.parametrize("stream_time", [-1, 0, 1, 1_700_000_000_123, 2**62])
def test_stream_time_round_trips_through_offset_metadata(stream_time: int) -> None:
    assert decode_stream_time(encode_stream_time(stream_time)) == stream_time


def test_stream_time_metadata_is_kafka_streams_layout() -> None:
    # Kafka Streams' TopicPartitionMetadata v1: base64(magic 1, 8-byte big-endian time).
    assert encode_stream_time(1_000) == "AQAAAAAAAAPo"
    # v2 appends processor metadata after the time: the time still reads.
    assert decode_stream_time("AgAAAAAAAAPoAAAAAA==") == 1_000


@pytest.mark.parametrize("metadata", [None, "", "not base64!", "AQ==", "AwAAAAAAAAPo"])
def test_anything_else_in_offset_metadata_is_no_stream_time(metadata: str | None) -> None:
    assert decode_stream_time(metadata) == -1


# -- records from the future (timestamp.max.future.ms) ----------------------------------

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


class Wall:
    """A wall clock in ms that counts its reads."""

    def __init__(self) -> None:
        self.now, self.reads = NOW_MS, 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now


def test_a_record_over_the_future_bound_is_an_invalid_timestamp_and_moves_no_time() -> None:
    world = World(policy=ExceptionPolicy.LOG_AND_CONTINUE, future=FutureBound(HOUR_MS, Wall()))

    world.send("a", NOW_MS, offset=1)
    world.send("far", NOW_MS + 100 * 365 * 86_400_000, offset=2)
    world.send("b", NOW_MS + HOUR_MS, offset=3)  # at the bound: accepted

    assert [key for key, *_ in world.seen] == ["a", "b"]
    assert world.skipped(INVALID_TIMESTAMP) == 1
    assert world.ctx.stream_time == NOW_MS + HOUR_MS


def test_a_dead_lettered_future_record_is_stamped_by_the_producer_not_by_itself() -> None:
    world = World(policy=ExceptionPolicy.DEAD_LETTER, future=FutureBound(HOUR_MS, Wall()))

    world.send("far", NOW_MS + 2 * HOUR_MS, offset=7)

    (letter,) = [r for r in world.collector.sent if r.topic == DLQ_TOPIC]
    headers = dict(letter.headers)
    assert letter.timestamp == 0, "a broker would refuse the record's own time"
    assert headers[HEADER_PREFIX + "timestamp"] == str(NOW_MS + 2 * HOUR_MS).encode()
    assert b"timestamp.max.future.ms" in headers[HEADER_PREFIX + "message"]


def test_the_future_bound_follows_the_wall_clock_and_reads_it_only_when_passed() -> None:
    wall = Wall()
    world = World(future=FutureBound(HOUR_MS, wall))

    for offset in range(100):
        world.send("k", NOW_MS + offset, offset=offset)
    assert wall.reads == 1, "the horizon is cached until a timestamp passes it"
    wall.now += HOUR_MS
    world.send("later", NOW_MS + 2 * HOUR_MS, offset=100)

    assert world.ctx.stream_time == NOW_MS + 2 * HOUR_MS and wall.reads == 2


def test_forward_with_a_timestamp_over_the_future_bound_is_refused() -> None:
    world = World(
        lambda ctx, key, value: ctx.forward(key, value, timestamp=NOW_MS + 2 * HOUR_MS),
        future=FutureBound(HOUR_MS, Wall()),
    )

    with pytest.raises(InvalidTimestamp, match="timestamp.max.future.ms"):
        world.send("a", NOW_MS)
    assert world.outputs() == []


def test_a_negative_bound_is_no_bound() -> None:
    world = World(future=FutureBound(-1, Wall()))

    world.send("far", 2**62)

    assert world.ctx.stream_time == 2**62
