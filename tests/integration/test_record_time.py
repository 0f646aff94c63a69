"""Record time on the broker: outputs and changelogs keep the input's timestamp and
headers, stream time survives restarts, and invalid timestamps meet each policy.

The app (tests/apps/record_time.py) copies each input to the output with the task's
stream time appended to the value, keeping the last value per key in a logged store.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps.record_time import INPUT_ENV, OUTPUT_ENV, STORE
from tests.support.transaction_log import LogRecord, read_committed_topic
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = pytest.mark.integration

REPO = str(Path(__file__).resolve().parents[2])  # the worker processes import tests.apps
APP = "tests.apps.record_time:build"
EXTRACTOR = "tests.apps.record_time:from_header"
GUARANTEES = ["at_least_once", "exactly_once_v2"]
Headers = list[tuple[str, bytes]] | None


class Topics:
    """A fresh one-partition input and output on the session broker."""

    def __init__(self, bootstrap: str) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.input, self.output = f"time-in-{suffix}", f"time-out-{suffix}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(t, 1, 1) for t in (self.input, self.output)]
        for future in admin.create_topics(topics).values():
            future.result(30)

    def produce(self, records: Sequence[tuple[str, str, int, Headers]]) -> None:
        """(key, value, timestamp, headers) records, in order, acknowledged."""
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        for key, value, timestamp, headers in records:
            producer.produce(
                self.input, value.encode(), key.encode(), timestamp=timestamp, headers=headers
            )
        assert producer.flush(30) == 0

    def committed(self, topic: str) -> list[LogRecord]:
        return [r for _, r in read_committed_topic(self.bootstrap, topic, 1)]

    def outputs(self) -> list[tuple[str, str, int, tuple[tuple[str, bytes], ...]]]:
        return [
            (r.key.decode(), r.value.decode(), r.timestamp, r.headers)
            for r in self.committed(self.output)
            if r.key is not None and r.value is not None
        ]

    def wait_outputs(self, count: int) -> list[Any]:
        wait_until(lambda: len(self.outputs()) >= count, 60, message=f"{count} outputs")
        return self.outputs()


@pytest.fixture
def topics(bootstrap: str) -> Topics:
    return Topics(bootstrap)


def start(
    worker_factory: Any,
    topics: Topics,
    name: str,
    settings: dict[str, object] | None = None,
    state_dir: Path | None = None,
) -> WorkerProcess:
    worker: WorkerProcess = worker_factory(
        name,
        settings={"commit.interval.ms": 200, **(settings or {})},
        args=["--app", APP],
        env={INPUT_ENV: topics.input, OUTPUT_ENV: topics.output, "PYTHONPATH": REPO},
        state_dir=state_dir,
    )
    worker.wait_ready(90)
    return worker


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_outputs_and_changelogs_keep_the_input_timestamps_and_headers(
    worker_factory: Any, topics: Topics, guarantee: str
) -> None:
    worker = start(worker_factory, topics, "w", {"processing.guarantee": guarantee})

    topics.produce(
        [
            ("k1", "a", 1_000, [("trace", b"t-1")]),
            ("k2", "b", 3_000, None),
            ("k1", "c", 2_000, [("trace", b"t-3"), ("empty", b"")]),
        ]
    )

    assert topics.wait_outputs(3) == [
        ("k1", "a|1000", 1_000, (("trace", b"t-1"),)),
        ("k2", "b|3000", 3_000, ()),
        ("k1", "c|3000", 2_000, (("trace", b"t-3"), ("empty", b""))),
    ]
    changelog = f"{worker_factory.application_id}-{STORE}-changelog"
    written = {"a": 1_000, "b": 3_000, "c": 2_000}  # value -> timestamp of the write
    wait_until(lambda: len(topics.committed(changelog)) >= 2, 30, message="changelog committed")
    stamps = [(r.value.decode(), r.timestamp) for r in topics.committed(changelog) if r.value]
    assert stamps and all(stamp == written[value] for value, stamp in stamps), stamps
    assert worker.terminate() == 0


def wait_committed_stream_time(worker: WorkerProcess, stream_time: int) -> None:
    worker.wait_for_metric("worker_task_stream_time_ms", lambda v: v == stream_time, 30, task="0_0")


@pytest.mark.parametrize(
    "guarantee, stop",
    [("at_least_once", "terminate"), ("at_least_once", "kill"), ("exactly_once_v2", "kill")],
)
def test_a_restarted_task_resumes_with_the_stream_time_of_its_last_commit(
    worker_factory: Any, topics: Topics, guarantee: str, stop: str
) -> None:
    settings = {"processing.guarantee": guarantee}
    first = start(worker_factory, topics, "first", settings)
    topics.produce([("k", "a", 5_000, None), ("k", "b", 7_000, None)])
    topics.wait_outputs(2)
    wait_committed_stream_time(first, 7_000)
    if stop == "kill":
        first.kill()
    else:
        assert first.terminate() == 0

    second = start(worker_factory, topics, "second", settings, state_dir=first.state_dir)
    wait_committed_stream_time(second, 7_000)
    topics.produce([("k", "c", 6_000, None)])

    outputs = topics.wait_outputs(3)
    assert [value for _, value, *_ in outputs] == ["a|5000", "b|7000", "c|7000"], (
        "resumed at 7000, nothing reprocessed"
    )
    assert second.terminate() == 0


def start_with_an_invalid_timestamp(
    worker_factory: Any, topics: Topics, policy: str
) -> WorkerProcess:
    """A worker under exactly-once taking the time from a ``ts`` header, with ``policy``
    for bad records, given three records: the middle one's timestamp is -5."""
    settings = {
        "timestamp.extractor": EXTRACTOR,
        "processing.guarantee": "exactly_once_v2",
        "default.deserialization.exception.handler": policy,
    }
    worker = start(worker_factory, topics, "w", settings)
    topics.produce(
        [
            ("k", "before", 1_000, None),
            ("k", "bad", 2_000, [("ts", b"-5")]),
            ("k", "after", 3_000, None),
        ]
    )
    return worker


def test_an_invalid_timestamp_under_fail_stops_the_worker_naming_the_record(
    worker_factory: Any, topics: Topics
) -> None:
    worker = start_with_an_invalid_timestamp(worker_factory, topics, "fail")

    assert worker.wait_exit(60) == 1
    (line,) = [line for line in worker.logs().splitlines() if line.startswith("error:")]
    assert f"{topics.input}-0@1 invalid timestamp" in line, line
    assert "-5" in line and "exception.handler = fail" in line, line


def test_an_invalid_timestamp_under_log_and_continue_is_skipped_and_counted(
    worker_factory: Any, topics: Topics
) -> None:
    worker = start_with_an_invalid_timestamp(worker_factory, topics, "log_and_continue")

    assert [value for _, value, *_ in topics.wait_outputs(2)] == ["before|1000", "after|3000"]
    worker.wait_for_metric(
        "worker_skipped_records_total", lambda v: v == 1, 30, reason="invalid_timestamp"
    )
    assert worker.terminate() == 0


def test_an_invalid_timestamp_under_dead_letter_goes_to_the_dlq_once(
    worker_factory: Any, topics: Topics
) -> None:
    worker = start_with_an_invalid_timestamp(worker_factory, topics, "dead_letter")

    assert [value for _, value, *_ in topics.wait_outputs(2)] == ["before|1000", "after|3000"]
    dlq = f"{worker_factory.application_id}-dlq"
    wait_until(lambda: len(topics.committed(dlq)) >= 1, 30, message="the dead letter")
    (letter,) = topics.committed(dlq)
    headers = dict(letter.headers)
    assert letter.value == b"bad" and headers["ts"] == b"-5"
    assert headers["__worker.errors.reason"] == b"invalid_timestamp"
    assert headers["__worker.errors.offset"] == b"1"
    assert letter.timestamp == 2_000, "the record's own time"
    assert worker.terminate() == 0
