"""The table writer counts only what the broker acknowledged, and stops at the first failure."""

from __future__ import annotations

import pickle
from typing import Any

import confluent_kafka as ck
import pytest

from worker.config import load
from worker.kafka.table_writer import (
    TableWriteFailed,
    TableWriter,
    WriteSummary,
    writer_config,
)


def write_table(config, topic, num_partitions, records, timeout=5.0, *, producer_factory):
    """One writer over ``records``, stopping at the first failure, as a task uses it."""
    writer = TableWriter(config, topic, num_partitions, producer_factory=producer_factory)
    try:
        for partition, key, value in records:
            if not writer.write(partition, key, value):
                break
    finally:
        summary = writer.finish(timeout)
    if not summary.ok:
        raise TableWriteFailed(topic, summary)
    return summary


class FakeMsg:
    def __init__(self, partition: int) -> None:
        self._partition = partition

    def partition(self) -> int:
        return self._partition


class FakeError:
    def __init__(self, text: str, fatal: bool = False) -> None:
        self.text, self._fatal = text, fatal

    def fatal(self) -> bool:
        return self._fatal

    def __str__(self) -> str:
        return self.text


class FakeProducer:
    """Queues records; ``poll``/``flush`` deliver them, failing those of ``failing`` partitions.

    ``stuck`` partitions are never acknowledged (flush reports them as remaining);
    ``full_once`` raises BufferError on the first produce, as a full local queue does.
    """

    def __init__(
        self, config: dict[str, Any], failing=(), stuck=(), full_once=False, raise_on=None
    ):
        self.config = config
        self.failing, self.stuck = set(failing), set(stuck)
        self.full_once, self.raise_on = full_once, raise_on
        self.queue: list[tuple[int, bytes, bytes | None, Any]] = []
        self.produced: list[tuple[int, bytes, bytes | None]] = []
        self.timestamps: list[int | None] = []  # None: produced without one (the time now)

    def produce(self, topic, value, key, partition, on_delivery, **stamp):
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        if self.raise_on is not None and partition == self.raise_on:
            raise ck.KafkaException(ck.KafkaError(ck.KafkaError.MSG_SIZE_TOO_LARGE))
        self.produced.append((partition, key, value))
        self.timestamps.append(stamp.pop("timestamp", None))
        assert not stamp, f"unexpected produce arguments {stamp}"
        self.queue.append((partition, key, value, on_delivery))

    def poll(self, timeout: float) -> int:
        delivered = [q for q in self.queue if q[0] not in self.stuck]
        self.queue = [q for q in self.queue if q[0] in self.stuck]
        for partition, _key, _value, callback in delivered:
            error = (
                FakeError(f"broker said no on {partition}") if partition in self.failing else None
            )
            callback(error, FakeMsg(partition))
        return len(delivered)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return len(self.queue)


def factory(**behaviour: Any):
    made: list[FakeProducer] = []

    def make(config: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(config, **behaviour))
        return made[-1]

    return make, made


RECORDS = [(0, b"a", b"1"), (1, b"b", b"2"), (1, b"c", None), (2, b"d", b"4")]


def test_every_record_goes_to_its_given_partition_and_acks_are_counted_per_partition():
    make, made = factory()

    summary = write_table({}, "t", 3, RECORDS, producer_factory=make)

    assert made[0].produced == RECORDS  # None value kept: a delete
    assert summary == WriteSummary({0: 1, 1: 2, 2: 1})
    assert summary.ok and summary.total_acked == 4


def test_a_full_local_queue_is_waited_out_not_lost():
    make, made = factory(full_once=True)

    assert write_table({}, "t", 3, RECORDS, producer_factory=make).total_acked == 4


def test_a_delivery_failure_raises_with_exactly_what_was_acknowledged():
    make, _ = factory(failing={1})

    with pytest.raises(TableWriteFailed) as failed:
        write_table({}, "t", 3, RECORDS, producer_factory=make)

    summary = failed.value.summary
    assert summary.acked == {0: 1, 2: 1}
    assert summary.failed == 2
    assert "broker said no on 1" in str(failed.value)


def test_records_still_unacknowledged_at_the_deadline_are_not_counted():
    make, _ = factory(stuck={2})

    with pytest.raises(TableWriteFailed) as failed:
        write_table({}, "t", 3, RECORDS, timeout=0.1, producer_factory=make)

    assert failed.value.summary.acked == {0: 1, 1: 2}
    assert failed.value.summary.unacked == 1


def test_after_a_produce_error_nothing_more_is_sent():
    make, made = factory(raise_on=1)

    with pytest.raises(TableWriteFailed, match="produce to t\\[1\\]"):
        write_table({}, "t", 3, RECORDS, producer_factory=make)

    assert made[0].produced == [(0, b"a", b"1")]


def test_after_a_delivery_failure_the_writer_refuses_further_records():
    make, made = factory(failing={0})
    writer = TableWriter({}, "t", 3, producer_factory=make)
    writer.write(0, b"a", b"1")
    made[0].poll(0)

    assert writer.failed
    assert writer.write(1, b"b", b"2") is False
    assert made[0].produced == [(0, b"a", b"1")]
    assert not writer.finish(1.0).ok


def test_a_fatal_client_error_stops_the_writer():
    make, made = factory()
    writer = TableWriter({}, "t", 3, producer_factory=make)

    made[0].config["error_cb"](FakeError("fenced", fatal=True))

    assert writer.write(0, b"a", b"1") is False
    assert writer.finish(1.0).errors == ("fatal producer error: fenced",)


def test_a_transient_client_error_is_left_to_librdkafka_retries():
    make, made = factory()
    writer = TableWriter({}, "t", 3, producer_factory=make)

    made[0].config["error_cb"](FakeError("broker down"))

    assert writer.write(0, b"a", b"1") is True
    assert writer.finish(1.0).ok


@pytest.mark.parametrize(("partition", "key"), [(3, b"k"), (-1, b"k"), (0, "k")])
def test_a_partition_outside_the_topic_or_a_non_bytes_key_is_a_bug(partition, key):
    make, _ = factory()
    writer = TableWriter({}, "t", 3, producer_factory=make)

    with pytest.raises(ValueError):
        writer.write(partition, key, b"v")


def test_summaries_add_up_and_pickle():
    a = WriteSummary({0: 2, 1: 1})
    b = WriteSummary({1: 3}, failed=1, errors=("x",))

    total = a + b

    assert total == WriteSummary({0: 2, 1: 4}, failed=1, errors=("x",))
    assert pickle.loads(pickle.dumps(total)) == total
    assert (
        total.describe()
        == "6 acknowledged (p0=2 p1=4), 1 failed, 0 unacknowledged (first error: x)"
    )


def test_the_writer_config_is_idempotent_with_acks_all_and_keeps_operator_settings():
    settings = load(None, {"kafka.security.protocol": "SSL"}, environ={}).settings

    config = writer_config(settings, message_timeout_ms=5000)

    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"
    assert config["message.timeout.ms"] == 5000
    assert config["security.protocol"] == "SSL"
