"""Readiness and liveness: not ready while the broker is unreachable or the loop has
stopped coming round; not alive once it has not come round for a minute. Both judged on
the worker's injected clock."""

from __future__ import annotations

from dataclasses import replace

from worker.clock import FakeClock
from worker.runtime.status import (
    HEALTH_STALE_SECONDS,
    LOOP_STALL_SECONDS,
    Status,
    TaskStatus,
    WorkerState,
)
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


def _worker_beating_at(clock: FakeClock) -> Worker:
    worker = Worker.__new__(Worker)  # only the snapshot hand-out is under test
    worker.clock = clock
    worker._status = replace(RUNNING, heartbeat=clock.monotonic())
    return worker


def test_liveness_is_judged_on_the_worker_clock_whatever_the_process_clock_reads() -> None:
    clock = FakeClock(now=1e9)  # far from time.monotonic(): a mix of clocks would show
    worker = _worker_beating_at(clock)
    assert worker.status().alive

    clock.advance(HEALTH_STALE_SECONDS - 1)
    assert worker.status().alive and worker.status().stalled

    clock.advance(2)
    assert not worker.status().alive


def test_a_worker_in_error_is_not_alive_even_with_a_fresh_heartbeat() -> None:
    clock = FakeClock()
    worker = _worker_beating_at(clock)
    worker._status = replace(worker._status, state=WorkerState.ERROR)

    assert not worker.status().alive
