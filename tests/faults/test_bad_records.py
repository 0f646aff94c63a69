"""Undecodable, oversized and poisoned records against real workers, one test per policy.

The topology is ``tests.apps.poison`` (counting, one output per input, a processor that
raises on inputs marked ``poison``). Each test writes good records around three bad ones:
a value that is not JSON, a value over ``max.record.bytes`` and a poisoned input.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import produce_raw
from tests.support.transaction_log import LogRecord, read_committed_topic
from tests.support.waiting import wait_until
from worker.events import RECORD_SKIPPED
from worker.examples import counting

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

PARTITIONS = 2
APP = "tests.apps.poison:build"
REPO = str(Path(__file__).resolve().parents[2])  # the worker processes import tests.apps
MAX_RECORD_BYTES = 1000
BAD = {"deserialization_error": 1, "record_too_large": 1, "processing_error": 1}


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
    for future in admin.create_topics(topics).values():
        future.result(30)


def good(first: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % 7}".encode(), orjson.dumps({"id": i})) for i in range(first, first + count)]


def bad_records() -> list[tuple[bytes, bytes]]:
    """Three bad records, on one key so that they sit in one partition, in this order."""
    return [
        (b"bad", b"{not json"),
        (b"bad", orjson.dumps({"id": -2, "pad": "x" * 2 * MAX_RECORD_BYTES})),
        (b"bad", orjson.dumps({"id": -3, "poison": True})),
    ]


def start_worker(worker_factory, bootstrap: str, policy: str, guarantee: str):  # type: ignore[no-untyped-def]
    settings = {
        "bootstrap.servers": bootstrap,
        "processing.guarantee": guarantee,
        "commit.interval.ms": 200,
        "default.deserialization.exception.handler": policy,
        "processing.exception.handler": policy,
        "processing.exception.max.retries": 2,
        "max.record.bytes": MAX_RECORD_BYTES,
    }
    return worker_factory("w", settings=settings, args=["--app", APP], env={"PYTHONPATH": REPO})


# Read from the transaction markers in the log, as a read_committed consumer on Kafka sees
# the topics: the test broker shows the records of aborted transactions (every revival
# aborts one under exactly-once) to read_committed consumers (tests/support/transaction_log.py).
def committed(bootstrap: str, topic: str) -> list[LogRecord]:
    return [r for _, r in read_committed_topic(bootstrap, topic, PARTITIONS)]


def output_ids(bootstrap: str) -> Counter[int]:
    return Counter(
        orjson.loads(r.value)["id"] for r in committed(bootstrap, counting.OUTPUTS) if r.value
    )


@pytest.mark.duration(10)
def test_dead_letter_sends_every_bad_record_to_the_dlq_exactly_once(own_broker, worker_factory):
    bootstrap = own_broker.bootstrap
    create_topics(bootstrap)
    worker = start_worker(worker_factory, bootstrap, "dead_letter", "exactly_once_v2")
    worker.wait_ready(90)

    produce_raw(bootstrap, counting.INPUTS, good(0, 50) + bad_records() + good(50, 50))

    wait_until(
        lambda: sum(output_ids(bootstrap).values()) >= 100, 60, message="100 outputs committed"
    )
    for reason, count in BAD.items():
        worker.wait_for_metric(
            "worker_skipped_records_total", lambda v, c=count: v == c, 30, reason=reason
        )
    ids = output_ids(bootstrap)
    assert set(ids) == set(range(100)) and max(ids.values()) == 1, "each good input once"
    letters = committed(bootstrap, f"{worker_factory.application_id}-dlq")
    by_reason = {dict(m.headers)["__worker.errors.reason"].decode(): m for m in letters}
    assert sorted(by_reason) == sorted(BAD) and len(letters) == 3, "each bad record once"
    poisoned = dict(by_reason["processing_error"].headers)
    assert poisoned["__worker.errors.exception"] == b"PoisonedRecord"
    assert poisoned["__worker.errors.topic"] == counting.INPUTS.encode()
    assert by_reason["processing_error"].value == bad_records()[2][1]
    assert by_reason["record_too_large"].value is None
    offsets = sorted(int(dict(m.headers)["__worker.errors.offset"]) for m in letters)
    assert offsets == [offsets[0], offsets[0] + 1, offsets[0] + 2], "their source offsets"
    assert worker.metric("worker_task_revivals_total", reason="processing_error") >= 3
    assert worker.ready() and worker.terminate() == 0


def test_log_and_continue_skips_bad_records_and_processes_the_rest(own_broker, worker_factory):
    bootstrap = own_broker.bootstrap
    create_topics(bootstrap)
    worker = start_worker(worker_factory, bootstrap, "log_and_continue", "at_least_once")
    worker.wait_ready(90)

    produce_raw(bootstrap, counting.INPUTS, good(0, 50) + bad_records() + good(50, 50))

    wait_until(lambda: set(output_ids(bootstrap)) >= set(range(100)), 60, message="all outputs")
    for reason, count in BAD.items():
        worker.wait_for_metric(
            "worker_skipped_records_total", lambda v, c=count: v == c, 30, reason=reason
        )
    assert worker.metric("worker_dead_lettered_records_total") == 0
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert f"{worker_factory.application_id}-dlq" not in topics
    skipped = [e for e in worker.log_events() if e.get("event") == RECORD_SKIPPED]
    assert skipped and all(e["policy"] == "log_and_continue" for e in skipped)
    assert worker.ready() and worker.terminate() == 0


@pytest.mark.parametrize(
    "bad, expected",
    [
        ((b"bad", b"{not json"), "deserialization error: SerdeError"),
        ((b"bad", orjson.dumps({"id": -3, "poison": True})), "failed 3 times: PoisonedRecord"),
    ],
    ids=["undecodable", "poisoned"],
)
def test_fail_stops_the_worker_with_an_error_naming_the_record(
    own_broker, worker_factory, bad, expected
):
    bootstrap = own_broker.bootstrap
    create_topics(bootstrap)
    worker = start_worker(worker_factory, bootstrap, "fail", "at_least_once")
    worker.wait_ready(90)

    produce_raw(bootstrap, counting.INPUTS, good(0, 10) + [bad])

    assert worker.wait_exit(60) == 1
    (line,) = [line for line in worker.logs().splitlines() if line.startswith("error:")]
    assert expected in line and f"{counting.INPUTS}-" in line, line
    assert "exception.handler = fail" in line, line
