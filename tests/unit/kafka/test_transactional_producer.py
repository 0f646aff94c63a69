"""The exactly-once producer's failure paths, through its collector, over a scripted fake
confluent-kafka producer.

What must hold: a transaction that cannot be aborted while the broker is away is aborted
by the same producer once it is back (the test broker does not abort it when a new
producer bumps the epoch), and only then is the producer replaced; a fenced producer is
replaced at once.
"""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pytest

from worker.config import load
from worker.errors import GenerationMoved, ProducerFenced, RebalanceInProgress, TransactionAborted
from worker.kafka import transactions
from worker.kafka.collector import RecordCollector
from worker.kafka.transactions import TransactionalProducer, TxnState, exactly_once_collector


def _timeout() -> ck.KafkaException:
    return ck.KafkaException(ck.KafkaError(ck.KafkaError._TIMED_OUT, "timed out", retriable=True))


class FakeProducer:
    """Records the transactional calls; ``script`` maps a call name to exceptions to raise,
    one per call, before the calls succeed."""

    made: list[FakeProducer] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.calls: list[str] = []
        self.script: dict[str, list[BaseException]] = {}
        self.unacked = 0
        FakeProducer.made.append(self)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        pending = self.script.get(name)
        if pending:
            raise pending.pop(0)

    def init_transactions(self, timeout: float) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def produce(self, topic: str, value: Any, key: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append("produce")
        self.unacked += 1

    def flush(self, timeout: float) -> int:
        self._call("flush")
        return self.unacked

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self._call("send_offsets_to_transaction")

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort_transaction")
        self.unacked = 0

    def purge(self, **kwargs: Any) -> None:
        self.calls.append("purge")

    def poll(self, timeout: float) -> int:
        pending = self.script.get("poll")
        if pending:
            raise pending.pop(0)
        return 0


Output = tuple[RecordCollector, TransactionalProducer]


@pytest.fixture
def output(monkeypatch: pytest.MonkeyPatch) -> Output:
    FakeProducer.made = []
    monkeypatch.setattr(transactions.ck, "Producer", FakeProducer)  # the module collector uses too
    settings = load(
        None,
        {"bootstrap.servers": "127.0.0.1:9", "processing.guarantee": "exactly_once_v2"},
        environ={},
    ).settings
    return exactly_once_collector(settings, "app-1")


def test_an_abort_the_broker_cannot_take_is_finished_by_the_same_producer_then_replaced(
    output: Output,
) -> None:
    collector, producer = output
    first = FakeProducer.made[-1]
    collector.send("out", b"k", b"v")
    first.script["abort_transaction"] = [_timeout(), _timeout()]

    assert producer.state is TxnState.IN_TRANSACTION
    with pytest.raises(TransactionAborted) as failed:
        producer.commit({("in", 0): 1}, lambda: b"meta")  # the record is never acknowledged
    assert not isinstance(failed.value, ProducerFenced)
    assert producer.state is TxnState.ABORT_PENDING
    with pytest.raises(TransactionAborted, match="not aborted yet"):
        producer.commit({("in", 0): 1}, lambda: b"meta")  # the broker is still away
    assert len(FakeProducer.made) == 1, "no new producer while the old transaction is open"
    assert producer.state is TxnState.ABORT_PENDING

    producer.commit({("in", 0): 1}, lambda: b"meta")  # the broker is back
    assert producer.state is TxnState.READY

    assert first.calls.count("abort_transaction") == 3, "the open transaction was aborted"
    assert "purge" in first.calls
    assert len(FakeProducer.made) == 2
    second = FakeProducer.made[-1]
    assert second.calls == [
        "init_transactions",
        "begin_transaction",
        "flush",
        "send_offsets_to_transaction",
        "commit_transaction",
    ]


def test_an_abort_that_keeps_failing_retriably_is_given_up_for_a_new_producer(
    output: Output,
) -> None:
    """A worker frozen past its transaction's timeout met a retriable abort failure on
    every try, with the broker up: after MAX_PENDING_ABORTS tries a new producer (whose
    init_transactions aborts what is open) takes over."""
    collector, producer = output
    first = FakeProducer.made[-1]
    collector.send("out", b"k", b"v")
    first.script["abort_transaction"] = [_timeout() for _ in range(100)]
    with pytest.raises(TransactionAborted):
        producer.commit({("in", 0): 1}, lambda: b"meta")
    for _ in range(transactions.MAX_PENDING_ABORTS - 1):
        with pytest.raises(TransactionAborted, match="not aborted yet"):
            producer.commit({("in", 0): 1}, lambda: b"meta")
        assert len(FakeProducer.made) == 1
    producer.commit({("in", 0): 1}, lambda: b"meta")
    assert len(FakeProducer.made) == 2, "replaced after the tries"
    assert producer.state is TxnState.READY
    assert FakeProducer.made[-1].calls[0] == "init_transactions"


def test_a_fenced_producer_is_replaced_without_trying_to_abort(
    output: Output,
) -> None:
    _, producer = output
    first = FakeProducer.made[-1]
    fenced = ck.KafkaException(ck.KafkaError(ck.KafkaError._FENCED, "fenced", fatal=True))
    first.script["commit_transaction"] = [fenced]

    with pytest.raises(TransactionAborted) as failed:
        producer.commit({("in", 0): 1}, lambda: b"meta")

    assert isinstance(failed.value, ProducerFenced)
    assert producer.state is TxnState.READY, "the new producer is initialised"
    assert "abort_transaction" not in first.calls
    assert len(FakeProducer.made) == 2
    assert FakeProducer.made[-1].calls == ["init_transactions"]


def test_an_abort_that_succeeds_at_once_keeps_the_producer(
    output: Output,
) -> None:
    _, producer = output
    first = FakeProducer.made[-1]
    first.script["send_offsets_to_transaction"] = [_timeout()]

    with pytest.raises(TransactionAborted):
        producer.commit({("in", 0): 1}, lambda: b"meta")
    producer.commit({("in", 0): 1}, lambda: b"meta")

    assert first.calls.count("abort_transaction") == 1
    assert len(FakeProducer.made) == 1


def test_offsets_refused_for_a_generation_that_moved_on_abort_and_keep_the_producer(
    output: Output,
) -> None:
    collector, producer = output
    first = FakeProducer.made[-1]
    collector.send("out", b"k", b"v")
    first.unacked = 0
    refused = ck.KafkaError(ck.KafkaError.ILLEGAL_GENERATION, "gen", txn_requires_abort=True)
    first.script["send_offsets_to_transaction"] = [ck.KafkaException(refused)]

    with pytest.raises(GenerationMoved):
        producer.commit({("in", 0): 1}, lambda: b"meta")

    assert first.calls[-1] == "abort_transaction"
    assert producer.state is TxnState.READY and len(FakeProducer.made) == 1


def test_the_group_metadata_is_read_after_the_flush_and_none_aborts(output: Output) -> None:
    collector, producer = output
    first = FakeProducer.made[-1]
    collector.send("out", b"k", b"v")
    first.unacked = 0

    def no_generation() -> bytes:
        assert first.calls[-1] == "flush", "read once every record is acknowledged"
        raise RebalanceInProgress("dropped from the group")

    with pytest.raises(GenerationMoved):
        producer.commit({("in", 0): 1}, no_generation)
    assert "send_offsets_to_transaction" not in first.calls
    assert first.calls[-1] == "abort_transaction"


def _fenced_in_a_callback(lost: bool = False) -> SystemError:
    """What confluent-kafka 2.16 raises when a delivery report is served after the fatal
    error of a fenced producer, the error chained or lost
    (worker.kafka.error_classifier.transaction_failure)."""
    if lost:
        return SystemError("<method 'flush'> returned NULL without setting an exception")
    fatal = ck.KafkaException(ck.KafkaError(ck.KafkaError._FENCED, "fenced", fatal=True))
    failure = SystemError("<function Deliveries.on_sink> returned a result with an exception set")
    failure.__cause__ = fatal
    return failure


@pytest.mark.parametrize("lost", [False, True], ids=["chained", "lost"])
def test_a_commit_whose_flush_meets_the_producer_fenced_in_a_callback_replaces_it(
    output: Output, lost: bool
) -> None:
    collector, producer = output
    first = FakeProducer.made[-1]
    collector.send("out", b"k", b"v")
    first.script["flush"] = [_fenced_in_a_callback(lost)]

    with pytest.raises(ProducerFenced):
        producer.commit({("in", 0): 1}, lambda: b"meta")

    assert len(FakeProducer.made) == 2, "a fenced producer is replaced at once"
    assert producer.state is TxnState.READY


def test_a_poll_that_finds_the_producer_fenced_fails_the_next_commit_not_the_loop(
    output: Output,
) -> None:
    collector, producer = output
    first = FakeProducer.made[-1]
    collector.send("out", b"k", b"v")
    first.script["poll"] = [_fenced_in_a_callback()]

    collector.poll()  # the processing loop's poll: nothing raised here

    with pytest.raises(ProducerFenced):
        collector.send("out", b"k", b"v2")
    with pytest.raises(ProducerFenced):
        producer.commit({("in", 0): 1}, lambda: b"meta")
    assert len(FakeProducer.made) == 2
    producer.commit({("in", 0): 1}, lambda: b"meta")  # the new producer commits
    assert producer.state is TxnState.READY
