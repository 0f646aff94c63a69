"""/readyz on Kafka as Kafka Streams users read ``KafkaStreams.State.RUNNING``: a worker is
ready only once its group's round is over and the tasks the round moves to it run there.

A worker that joins a running group gets, in the round that lets it in, no active task:
its share is still owned by the others and reaches it as standbys awaiting their release
(worker/tasks/handover.py). Its member is stable then, with an empty assignment;
readiness still waits for the take-over (``Worker._follow_group``). Exactly-once, whose
release is a transaction commit, makes that wait long enough to be seen: before the fix
the joining worker answered ready with one of its two tasks running.
"""

from __future__ import annotations

import orjson
import pytest

from tests.support.eos_scenario import APP, Inputs, eos_settings
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]

PARTITIONS = 4


def _sample(worker: WorkerProcess) -> tuple[int, int] | None:
    """(/readyz status, running active tasks it lists), None while nothing answers."""
    try:
        status, body = worker.get("/readyz", timeout=2)
    except OSError:
        return None
    tasks = orjson.loads(body)["tasks"]
    running = sum(1 for t in tasks if t["kind"] == "active" and t["state"] == "running")
    return status, running


def _active_when_first_running(worker: WorkerProcess) -> set[str]:
    """The active tasks running when the worker first entered RUNNING (when /readyz first
    answered 200), read in its log's order."""
    running: set[str] = set()
    for event in worker.log_events():
        if event.get("event") == "worker.transition" and event.get("dst") == "running":
            return running
        if event.get("event") == "task.transition" and event.get("role") == "active":
            if event.get("dst") == "running":
                running.add(str(event["task_id"]))
            else:
                running.discard(str(event["task_id"]))
    raise AssertionError("the worker never ran")


@pytest.mark.duration(30)
def test_a_joining_worker_is_ready_only_once_it_runs_its_share(own_broker, worker_factory):
    inputs = Inputs(own_broker.bootstrap, PARTITIONS, keys=50, seed=7)
    inputs.produce(200)  # stores with data: the move is a real hand-over
    settings = eos_settings(own_broker.bootstrap, **{"num.standby.replicas": 0})
    a = worker_factory("a", settings=settings, args=["--app", APP])
    a.wait_ready(90)
    assert a.metric("worker_tasks", kind="active") == PARTITIONS

    b = worker_factory("b", settings=settings, args=["--app", APP])
    wait_until(lambda: _sample(b) == (200, PARTITIONS // 2), 90, message="b ready with its share")
    # The moment readiness came, read from b's log: sampling /readyz could miss a
    # premature 200 (one lasted ~0.1 s at-least-once).
    assert len(_active_when_first_running(b)) == PARTITIONS // 2
    # a, whose round may still be settling, gets there too (and keeps only its half).
    wait_until(lambda: _sample(a) == (200, PARTITIONS // 2), 30, message="a ready with its half")
