"""Punctuators on the broker, under exactly-once: a stream-time punctuator fires once per
interval across a restart, a kill -9 between a punctuation and its commit, and a move to
another worker; a wall-clock punctuator fires wherever the task is active.

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


@pytest.mark.duration(60)
def test_a_stream_punctuator_fires_once_per_interval_across_restart_crash_and_move(
    worker_factory, tmp_path: Path
) -> None:
    bootstrap = worker_factory.bootstrap
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"punct-in-{suffix}", f"punct-out-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (source, sink)]).values():
        future.result(30)
    env = {
        "PYTHONPATH": REPO,
        punctuating.INPUT_ENV: source,
        punctuating.OUTPUT_ENV: sink,
        punctuating.CRASH_AT_ENV: str(FIRST + 2),
        punctuating.CRASH_MARKER_ENV: str(tmp_path / "crashed"),
    }

    def start(name: str):  # type: ignore[no-untyped-def]
        settings = {**SETTINGS, "bootstrap.servers": bootstrap}
        return worker_factory(name, settings=settings, args=["--app", APP], env=env)

    def until_fired(last: int) -> list[int]:
        found: list[int] = wait_until(
            lambda: (got := fired(bootstrap, sink)) and got[-1] >= last and got,
            60,
            message=f"interval {last} punctuated and committed",
        )
        return found

    a = start("a")
    a.wait_ready(60)
    produce(bootstrap, source, 0, 0, 10)
    assert until_fired(0) == [0]
    wait_until(lambda: wall_runs(a) >= 3, 30, message="the wall punctuator runs on the active")

    assert a.terminate() == 0  # restart in the middle of interval 0
    a.start().wait_ready(60)
    produce(bootstrap, source, 0, 10, 10)
    produce(bootstrap, source, 1, 0, 10)
    assert until_fired(1) == [0, 1]

    produce(bootstrap, source, 2, 0, 10)  # the punctuation of interval 2 kills its worker
    assert a.wait_exit(60) == -9
    a.start().wait_ready(60)
    assert until_fired(2) == [0, 1, 2], "replayed after the crash, committed once"

    b = start("b")
    wait_until(lambda: b.ready(), 60, message="b joined")
    assert a.terminate() == 0  # the task moves to b in the middle of interval 2
    wait_until(lambda: b.metric("worker_tasks", kind="active") == 1, 60, message="b took the task")
    produce(bootstrap, source, 2, 10, 10)
    produce(bootstrap, source, 3, 0, 10)
    assert until_fired(3) == [0, 1, 2, 3]
    wait_until(lambda: wall_runs(b) >= 3, 30, message="the wall punctuator runs on b now")
    assert b.terminate() == 0
