"""A run that fails with a fatal error shows ERROR while it releases what it started."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from worker.clock import FakeClock
from worker.config import load
from worker.errors import FatalError
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.runtime import worker as worker_module
from worker.runtime.broker_wait import StartupStopped
from worker.runtime.status import Status, WorkerState
from worker.runtime.worker import Worker


class Broken(FatalError):
    pass


class FailingMember:
    """A group member whose first poll fails the way a fenced or misconfigured one does."""

    can_commit = False
    rebalancing = True

    def start(self, stale_member_id: str | None = None) -> None:
        return None

    def poll(self) -> list[Any]:
        raise Broken("the group rejected this member")


def _runtime() -> Any:
    state_dir = SimpleNamespace(process_id="p", previous_member_id=lambda: None)
    return SimpleNamespace(
        http=SimpleNamespace(port=1),
        layout=SimpleNamespace(partitions={0: 1}),
        state_dir=state_dir,
        member=FailingMember(),
        parts=SimpleNamespace(tasks=SimpleNamespace(by_id={})),
        reader=SimpleNamespace(lag=lambda _task_id: None),
        broker_wait=SimpleNamespace(run=lambda _step, attempt: attempt()),
    )


def _worker(tmp_path: Path, metrics: Metrics) -> Worker:
    values = {
        "application.id": "errors",
        "state.dir": str(tmp_path),
        "initial.standbys.enabled": False,
    }
    settings = load(None, values, environ={}).settings
    return Worker(settings, cast(BuiltTopology, None), metrics=metrics, clock=FakeClock())


def _state_gauge(metrics: Metrics, state: WorkerState) -> float | None:
    return metrics.registry.get_sample_value("worker_state", {"state": state.value})


def test_a_fatal_error_in_the_loop_enters_error_while_the_run_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = Metrics()
    worker = _worker(tmp_path, metrics)
    seen_while_releasing: list[Status] = []

    def assemble(stack: ExitStack, *_args: Any) -> Any:
        stack.callback(lambda: seen_while_releasing.append(worker.status()))
        return _runtime()

    monkeypatch.setattr(worker_module, "assemble", assemble)

    with pytest.raises(Broken):
        worker.run()
    worker._watchdog.finish()

    [status] = seen_while_releasing
    assert status.state is WorkerState.ERROR
    assert not status.alive and not status.ready
    assert _state_gauge(metrics, WorkerState.ERROR) == 1.0
    assert _state_gauge(metrics, WorkerState.REBALANCING) == 0.0


def test_a_failed_start_enters_error_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = Metrics()
    worker = _worker(tmp_path, metrics)

    def assemble(_stack: ExitStack, *_args: Any) -> Any:
        raise Broken("topics missing")

    monkeypatch.setattr(worker_module, "assemble", assemble)

    with pytest.raises(Broken):
        worker.run()
    worker._watchdog.finish()

    assert worker.status().state is WorkerState.ERROR
    assert _state_gauge(metrics, WorkerState.ERROR) == 1.0


def test_a_stop_while_waiting_for_the_broker_at_start_up_is_a_clean_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = Metrics()
    worker = _worker(tmp_path, metrics)

    def assemble(stack: ExitStack, *_args: Any) -> Any:
        raise StartupStopped("stopped while waiting for the broker (topics)")

    monkeypatch.setattr(worker_module, "assemble", assemble)

    assert worker.run() == 0
    worker._watchdog.finish()

    assert worker.status().state is WorkerState.NOT_RUNNING
    assert _state_gauge(metrics, WorkerState.ERROR) == 0.0
