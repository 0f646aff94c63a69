"""Readiness: not ready while the broker is unreachable or the loop has stopped coming round."""

from __future__ import annotations

from dataclasses import replace

from worker.clock import FakeClock
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
    worker.clock = clock = FakeClock()
    worker._status = replace(RUNNING, heartbeat=clock.monotonic())
    assert worker.status().ready

    clock.advance(LOOP_STALL_SECONDS + 1)

    assert worker.status().stalled and not worker.status().ready
