"""The transaction-aware log reader the exactly-once tests rely on, against the broker.

It must show exactly what a Kafka ``read_committed`` consumer shows: committed and
non-transactional records, never aborted ones, never those of a transaction still open.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import read_partition
from tests.support.transaction_log import read_committed_partition, read_committed_topic
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu", "kafka")]

# A producer that leaves its transaction open or aborts it, in its own process, so that
# "killed mid-transaction" is a real process exit with records in the log.
_TRANSACTION = r"""
import os, sys
import confluent_kafka as ck
import pytest
bootstrap, txn_id, topic, ending = sys.argv[1:]
producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(5):
    producer.produce(topic, value=b"uncommitted-%d" % i, partition=0)
producer.flush(30)
if ending == "abort":
    producer.abort_transaction(30)
os._exit(0)
"""


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"txlog-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _leave_transaction(bootstrap: str, txn_id: str, topic: str, ending: str) -> None:
    subprocess.run(
        [sys.executable, "-c", _TRANSACTION, bootstrap, txn_id, topic, ending],
        check=True,
        timeout=120,
    )


def _commit(bootstrap: str, txn_id: str, topic: str, values: list[bytes]) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.commit_transaction(30)


def _plain(bootstrap: str, topic: str, value: bytes) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=value, partition=0)
    producer.flush(30)


def _values(bootstrap: str, topic: str) -> list[bytes | None]:
    return [r.value for r in read_committed_partition(bootstrap, topic, 0)]


def _shows(read: Callable[[], list[bytes | None]], expected: list[bytes]) -> None:
    """Wait until ``read`` returns ``expected``. Kafka answers a transaction's commit once
    it is decided, and writes its markers to the partitions afterwards: until the marker
    is written, the last stable offset (where read_committed readers stop) stays before
    the transaction's records."""
    last: list[bytes | None] = []

    def shown() -> bool:
        last[:] = read()
        return last == expected

    wait_until(shown, 30, message=lambda: f"{expected}, read {last}")


def test_an_aborted_transaction_is_hidden_and_the_next_commit_shown(bootstrap):
    topic = _topic(bootstrap)
    _plain(bootstrap, topic, b"plain")
    _leave_transaction(bootstrap, "txlog-abort", topic, "abort")
    _commit(bootstrap, "txlog-abort", topic, [b"a", b"b"])
    _shows(lambda: _values(bootstrap, topic), [b"plain", b"a", b"b"])


def test_a_killed_producers_transaction_is_hidden_once_its_successor_rolls_it_back(bootstrap):
    topic = _topic(bootstrap)
    _leave_transaction(bootstrap, "txlog-killed", topic, "kill")
    _commit(bootstrap, "txlog-killed", topic, [b"after"])
    _shows(lambda: _values(bootstrap, topic), [b"after"])


def test_a_transaction_left_open_is_hidden_while_other_producers_records_show(bootstrap):
    topic = _topic(bootstrap)
    _leave_transaction(bootstrap, f"txlog-open-{uuid.uuid4().hex[:6]}", topic, "kill")
    _commit(bootstrap, "txlog-other", topic, [b"other"])
    _plain(bootstrap, topic, b"plain")
    _shows(lambda: _values(bootstrap, topic), [b"other", b"plain"])


def test_records_come_back_in_offset_order_per_partition(bootstrap):
    topic = _topic(bootstrap, partitions=2)
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(300):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    producer.flush(30)
    records = read_committed_topic(bootstrap, topic, 2)
    for partition in (0, 1):
        offsets = [r.offset for p, r in records if p == partition]
        assert offsets == list(range(150))
    assert sorted(int(r.value or b"") for _, r in records) == list(range(300))


def test_a_plain_read_committed_consumer_hides_an_aborted_transaction_on_kafka_only(
    bootstrap, broker_kind
):
    """Why the helper exists: Kafka hides aborted records from read_committed readers
    itself; the test broker serves them (docs/platform-notes.md)."""
    topic = _topic(bootstrap)
    txn_id = f"txlog-plain-{uuid.uuid4().hex[:6]}"
    _leave_transaction(bootstrap, txn_id, topic, "abort")
    _commit(bootstrap, txn_id, topic, [b"a"])
    aborted = [b"uncommitted-%d" % i for i in range(5)]
    _shows(
        lambda: [value for _, _, value in read_partition(bootstrap, topic, 0)],
        [b"a"] if broker_kind == "kafka" else [*aborted, b"a"],
    )
    _shows(lambda: _values(bootstrap, topic), [b"a"])  # the helper agrees with Kafka on both
