"""Transactional table writes: each partition commits all of its records or none of them."""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pytest

from tests.unit.spark.test_table_writer import FakeProducer
from worker.kafka.table_writer import (
    TableWriteFailed,
    fence_partitions,
    transactional_id,
    write_transactions,
)


class TxnProducer(FakeProducer):
    """A FakeProducer that records its transaction calls; ``commit_fails`` fails the commit."""

    def __init__(self, config: dict[str, Any], commit_fails: bool = False, **behaviour: Any):
        super().__init__(config, **behaviour)
        self.calls: list[str] = []
        self.commit_fails = commit_fails

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        self.flush(timeout)
        if self.commit_fails:
            raise ck.KafkaException(ck.KafkaError(ck.KafkaError._TIMED_OUT))
        self.calls.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")


def factory(**behaviour: Any) -> tuple[Any, dict[str, TxnProducer]]:
    made: dict[str, TxnProducer] = {}

    def make(config: dict[str, Any]) -> TxnProducer:
        made[config["transactional.id"]] = TxnProducer(config, **behaviour)
        return made[config["transactional.id"]]

    return make, made


RECORDS = [
    (0, b"a", b"1", None),
    (1, b"b", b"2", None),
    (1, b"c", None, None),
    (0, b"d", b"4", None),
]


def test_each_partition_is_written_by_its_own_stably_named_transaction():
    make, made = factory()

    summary = write_transactions({}, "t", 2, RECORDS, producer_factory=make)

    assert set(made) == {transactional_id("t", 0), transactional_id("t", 1)}
    assert transactional_id("t", 0) == "worker-table-load.t.0"  # the same on every attempt
    for partition, producer in enumerate(made.values()):
        assert producer.calls == ["init", "begin", "commit"]
        assert {p for p, _, _ in producer.produced} == {partition}
        assert producer.config["transaction.timeout.ms"] == 900_000
    assert summary.acked == {0: 2, 1: 2} and summary.ok


def test_each_record_carries_its_own_timestamp_and_none_leaves_it_to_the_producer():
    make, made = factory()
    stamped = [(0, b"a", b"1", 1_700_000_000_000), (0, b"b", None, None), (1, b"c", b"3", 5)]

    write_transactions({}, "t", 2, stamped, producer_factory=make)

    assert made[transactional_id("t", 0)].timestamps == [1_700_000_000_000, None]
    assert made[transactional_id("t", 1)].timestamps == [5]


def test_a_timestamp_librdkafka_would_read_as_now_is_refused_before_it_is_sent():
    make, made = factory()

    with pytest.raises(ValueError, match="positive epoch ms, got 0"):
        write_transactions({}, "t", 2, [(0, b"a", b"1", 0)], producer_factory=make)

    producer = made[transactional_id("t", 0)]
    assert producer.produced == [] and producer.calls[-1] == "abort"


def test_a_failed_record_aborts_every_partition_of_the_task_and_counts_nothing():
    make, made = factory(failing={1})

    with pytest.raises(TableWriteFailed) as failed:
        write_transactions({}, "t", 2, RECORDS, producer_factory=make)

    assert all(p.calls[-1] == "abort" for p in made.values())
    assert failed.value.summary.total_acked == 0, "aborted records are not visible"


def test_a_failed_commit_aborts_and_reports_the_commit_error():
    make, made = factory(commit_fails=True)

    with pytest.raises(TableWriteFailed) as failed:
        write_transactions({}, "t", 2, RECORDS[:1], producer_factory=make)

    assert made[transactional_id("t", 0)].calls == ["init", "begin", "abort"]
    assert "commit of the transaction on t" in failed.value.summary.errors[0]
    assert failed.value.summary.total_acked == 0


def test_an_exception_from_the_input_aborts_what_was_written():
    make, made = factory()

    def records():
        yield RECORDS[0]
        raise RuntimeError("the Spark task died")

    with pytest.raises(RuntimeError):
        write_transactions({}, "t", 2, records(), producer_factory=make)

    assert made[transactional_id("t", 0)].calls[-1] == "abort"


def test_fencing_starts_each_idle_partitions_writer_without_writing():
    made: dict[str, TxnProducer] = {}

    def make(config: dict[str, Any]) -> TxnProducer:
        made[config["transactional.id"]] = TxnProducer(config)
        return made[config["transactional.id"]]

    fence_partitions({"message.timeout.ms": 120_000}, "t", [1, 3], producer_factory=make)

    assert set(made) == {transactional_id("t", 1), transactional_id("t", 3)}
    for producer in made.values():
        assert producer.calls == ["init"] and producer.produced == []
        assert producer.config["transaction.timeout.ms"] >= producer.config["message.timeout.ms"]
