"""Readiness: not ready while the broker is unreachable or the loop has stopped coming round."""

from __future__ import annotations

import time
from dataclasses import replace

from worker.runtime.status import LOOP_STALL_SECONDS, Status, TaskStatus, WorkerState
from worker.runtime.worker import Worker

RUNNING = Status(WorkerState.RUNNING, (TaskStatus("0_0", "active", "running"),), 0.0)


def test_a_running_worker_connected_to_the_broker_is_ready() -> None:
    assert RUNNING.ready


def test_a_worker_that_cannot_reach_the_broker_is_not_ready() -> None:
    assert not replace(RUNNING, broker_connected=False).ready


def test_a_stalled_loop_is_not_ready() -> None:
    assert not replace(RUNNING, stalled=True).ready


def test_the_worker_marks_a_snapshot_stalled_once_the_loop_stops_coming_round() -> None:
    worker = Worker.__new__(Worker)  # only the snapshot hand-out is under test
    now = time.monotonic()
    worker._status = replace(RUNNING, heartbeat=now)
    assert worker.status().ready

    worker._status = replace(RUNNING, heartbeat=now - LOOP_STALL_SECONDS - 1)

    assert worker.status().stalled and not worker.status().ready
