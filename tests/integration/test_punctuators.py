"""Punctuators on the broker, under exactly-once: a stream-time punctuator fires once per
interval across a restart, a kill -9 between a punctuation and its commit, and a move to
another worker; a wall-clock punctuator fires where the task is active, and only there.

The topology is ``tests.apps.punctuating`` on one partition. Input records carry chosen
timestamps: interval ``k`` is ``[BASE + k*INTERVAL, BASE + (k+1)*INTERVAL)``. Each event (restart,
crash, move) falls in the middle of an interval: half its records before, half after.
A new owner that lost the task's stream time would cross that interval's boundary again
and punctuate twice; one that kept it does not. Outputs are read as a read_committed
consumer on Kafka sees them (tests/support/transaction_log.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import confluent_kafka as ck
import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps import punctuating
from tests.support.transaction_log import read_committed_partition
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

APP = "tests.apps.punctuating:build"
REPO = str(Path(__file__).resolve().parents[2])  # the worker processes import tests.apps
INTERVAL = punctuating.INTERVAL_MS
BASE = 1_700_000_000_000  # interval k starts at BASE + k * INTERVAL
FIRST = BASE // INTERVAL  # the boundary index of interval 0
SETTINGS = {"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 200}


def produce(bootstrap: str, topic: str, interval: int, first: int, count: int) -> None:
    """``count`` records of interval ``interval``, at ms ``first, first+1, ...`` into it."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(first, first + count):
        value = orjson.dumps({"interval": interval, "n": n})
        producer.produce(
            topic, value, b"key", partition=0, timestamp=BASE + interval * INTERVAL + n
        )
    assert producer.flush(30) == 0


def fired(bootstrap: str, topic: str) -> list[int]:
    """The committed punctuations, as interval indexes, in output order."""
    outputs = read_committed_partition(bootstrap, topic, 0)
    return [orjson.loads(r.value)["now"] // INTERVAL - FIRST for r in outputs if r.value]


def wall_runs(worker) -> float:  # type: ignore[no-untyped-def]
    return worker.metric("worker_punctuations_total", task="0_0", kind="wall")


class PunctuatingApp:
    """Fresh topics for ``tests.apps.punctuating`` on the session broker, and its workers."""

    def __init__(self, worker_factory, crash_marker: Path | None = None) -> None:  # type: ignore[no-untyped-def]
        self.factory = worker_factory
        self.bootstrap: str = worker_factory.bootstrap
        suffix = uuid.uuid4().hex[:8]
        self.source, self.sink = f"punct-in-{suffix}", f"punct-out-{suffix}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(t, 1, 1) for t in (self.source, self.sink)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        self.env = {
            "PYTHONPATH": REPO,
            punctuating.INPUT_ENV: self.source,
            punctuating.OUTPUT_ENV: self.sink,
        }
        if crash_marker is not None:  # the punctuation of interval 2 kills its worker, once
            self.env[punctuating.CRASH_AT_ENV] = str(FIRST + 2)
            self.env[punctuating.CRASH_MARKER_ENV] = str(crash_marker)

    def worker(self, name: str):  # type: ignore[no-untyped-def]
        settings = {**SETTINGS, "bootstrap.servers": self.bootstrap}
        return self.factory(name, settings=settings, args=["--app", APP], env=self.env)

    def produce(self, interval: int, first: int, count: int) -> None:
        produce(self.bootstrap, self.source, interval, first, count)

    def until_fired(self, last: int) -> list[int]:
        """The committed punctuations once the one of interval ``last`` is among them."""
        found: list[int] = wait_until(
            lambda: (got := fired(self.bootstrap, self.sink)) and got[-1] >= last and got,
            60,
            message=lambda: f"interval {last} punctuated: {fired(self.bootstrap, self.sink)}",
        )
        return found


@pytest.mark.duration(40)
def test_a_stream_punctuator_fires_once_per_interval_across_a_restart_and_a_kill_9(
    worker_factory, tmp_path: Path
) -> None:
    app = PunctuatingApp(worker_factory, tmp_path / "crashed")
    a = app.worker("a")
    a.wait_ready(60)
    app.produce(0, 0, 10)
    assert app.until_fired(0) == [0]
    wait_until(lambda: wall_runs(a) >= 3, 30, message="the wall punctuator runs on the active")

    assert a.terminate() == 0  # restart in the middle of interval 0
    a.start().wait_ready(60)
    app.produce(0, 10, 10)
    app.produce(1, 0, 10)
    assert app.until_fired(1) == [0, 1], "interval 0 not punctuated again"

    app.produce(2, 0, 10)  # the punctuation of interval 2 kills its worker (kill -9)
    assert a.wait_exit(60) == -9
    a.start().wait_ready(60)
    assert app.until_fired(2) == [0, 1, 2], "replayed after the crash, committed once"
    assert a.terminate() == 0


@pytest.mark.duration(35)
def test_a_stream_punctuator_fires_once_per_interval_across_a_move(worker_factory) -> None:
    app = PunctuatingApp(worker_factory)
    a = app.worker("a")
    a.wait_ready(60)
    app.produce(0, 0, 10)
    assert app.until_fired(0) == [0]
    b = app.worker("b")
    wait_until(lambda: b.ready(), 60, message="b joined")
    assert wall_runs(b) == 0, "b holds no active task: no punctuation there"

    assert a.terminate() == 0  # the task moves to b in the middle of interval 0
    wait_until(lambda: b.metric("worker_tasks", kind="active") == 1, 60, message="b took the task")
    app.produce(0, 10, 10)
    app.produce(1, 0, 10)
    wait_until(lambda: wall_runs(b) >= 3, 30, message="the wall punctuator runs on b now")
    assert app.until_fired(1) == [0, 1], "interval 0 not punctuated again on b"
    assert b.terminate() == 0
