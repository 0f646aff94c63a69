"""Stream time across a move on the test broker, which drops committed offset metadata
(docs/platform-notes.md): a task with a store moves to the worker that held its standby,
after a clean stop and after a kill -9 of its owner, and resumes there with the stream
time of its last commit, carried by the stream-time marker in its changelog
(worker/state/stream_time_marker.py).

The app (tests/apps/record_time.py) copies each input to the output with the task's
stream time appended, keeping the last value per key in a logged store; one partition,
so one task, ``0_0``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.integration.test_record_time import Topics, start, wait_committed_stream_time
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = pytest.mark.integration

TASK = "0_0"


@pytest.fixture
def topics(bootstrap: str) -> Topics:
    return Topics(bootstrap)


def held(worker: WorkerProcess) -> dict[str, tuple[str, dict[str, int | None]]]:
    """task id -> (kind, store name -> stored changelog offset), from ``/tasks``."""
    code, body = worker.get("/tasks")
    assert code == 200
    return {
        t["task_id"]: (t["kind"], {s["name"]: s["offset"] for s in t["stores"]})
        for t in orjson.loads(body)["tasks"]
    }


def standby_caught_up(active: WorkerProcess, standby: WorkerProcess) -> bool:
    """``standby`` holds the task as a standby with the stores its active committed."""
    if active.metric("worker_uncommitted_bytes") != 0:
        return False
    mine, theirs = held(active).get(TASK), held(standby).get(TASK)
    return (
        mine is not None
        and theirs is not None
        and (mine[0], theirs[0]) == ("active", "standby")
        and mine[1] == theirs[1]
    )


@pytest.mark.parametrize(
    "guarantee, stop",
    [
        ("at_least_once", "terminate"),
        ("exactly_once_v2", "terminate"),
        ("exactly_once_v2", "kill"),
        ("at_least_once", "kill"),
    ],
)
@pytest.mark.duration(40)
def test_a_task_moved_to_its_standby_resumes_with_the_committed_stream_time(
    worker_factory: Any, topics: Topics, guarantee: str, stop: str
) -> None:
    settings = {"processing.guarantee": guarantee, "num.standby.replicas": 1}
    a = start(worker_factory, topics, "a", settings)
    topics.produce([("k", "a", 5_000, None), ("k", "b", 7_000, None)])
    topics.wait_outputs(2)
    wait_committed_stream_time(a, 7_000)
    b = start(worker_factory, topics, "b", settings)
    wait_until(lambda: standby_caught_up(a, b), 60, message=lambda: f"{held(a)} / {held(b)}")

    if stop == "kill":
        a.kill()
    else:
        assert a.terminate() == 0
    wait_until(lambda: held(b).get(TASK, ("", {}))[0] == "active", 60, message="b took 0_0")
    wait_committed_stream_time(b, 7_000)
    topics.produce([("k", "c", 6_000, None)])

    outputs = [value for _, value, *_ in topics.wait_outputs(3)]
    assert outputs[-1] == "c|7000", f"resumed at 7000 on b: {outputs}"
    assert "c|6000" not in outputs
    assert b.terminate() == 0
