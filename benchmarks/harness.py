"""A benchmark's run and its processes: the run context, the broker, worker processes and
waiting on them. Topics and bulk I/O are in :mod:`benchmarks.kafka_io`, samplers in
:mod:`benchmarks.sampling`, log reading in :mod:`benchmarks.log_events`.

Every process a benchmark starts (broker, workers, py-spy) is registered on the run's
:class:`contextlib.ExitStack` the moment it exists, and stopped by its own PID when the
benchmark ends, whether it succeeded or not. Nothing is ever signalled by name.

Workers are the real thing: ``python -m worker start`` children driven through
:class:`worker.dev.processes.WorkerProcess` (the same harness the integration tests
use) and observed only from outside: ``/metrics``, ``/readyz``, logs, output topics.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from worker.config import Settings, load
from worker.dev.broker import BrokerProcess, EmbeddedBroker, free_port
from worker.dev.kafka_broker import KafkaBroker
from worker.dev.processes import WorkerProcess, WorkerProcessFailed

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")

# Group timing that suits the embedded broker (platform-facts.md: joins hang with
# librdkafka's default max.poll.interval.ms as the rebalance timeout). The same values
# the integration tests use.
GROUP_SETTINGS: dict[str, object] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "max.poll.interval.ms": 10000,
}


class BenchmarkFailed(Exception):
    """A benchmark could not produce its measurement (a process died, a wait timed out)."""


class BenchmarkStopping(BenchmarkFailed):
    """Something was about to start while the benchmark was being torn down."""


@dataclass
class RunContext:
    """One benchmark's surroundings: its work directory and what to stop at its end.

    Everything a benchmark starts goes through :meth:`own`, which registers the stop
    action and starts the thing under one lock; :meth:`close` takes that lock, refuses
    every later start and runs the stop actions, last started first. So a helper thread
    (scale-out runs its modes side by side in quick mode) can never leave a process
    behind that was started while the benchmark was being torn down.
    """

    workdir: Path
    plots_dir: Path
    quick: bool
    profile: bool = False
    broker: str = "embedded"  # or "kafka": what start_chosen_broker starts
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: bool = False

    def own(self, start: Callable[[], T], stop: Callable[[], object]) -> T:
        """Register ``stop`` (idempotent, safe before ``start`` ran), then ``start()``.

        Raises BenchmarkStopping, starting nothing, once :meth:`close` has begun.
        """
        with self._lock:
            if self._closing:
                raise BenchmarkStopping("the benchmark is being stopped")
            self._stack.callback(stop)
            return start()

    def close(self) -> None:
        """Stop everything :meth:`own` started; later starts are refused. Idempotent."""
        with self._lock:
            self._closing = True
            self._stack.close()

    def path(self, *parts: str) -> Path:
        """A file under the work directory (its parent created)."""
        target = self.workdir.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def plot_path(self, name: str) -> Path:
        """Where the report's PNG called ``name`` goes."""
        self.plots_dir.mkdir(parents=True, exist_ok=True)
        return self.plots_dir / f"{name}.png"


# -- processes --------------------------------------------------------------------------


def start_broker(run: RunContext, name: str = "broker") -> EmbeddedBroker:
    """A fresh in-memory broker on a free loopback port, stopped by PID at the end."""
    broker = EmbeddedBroker(log_path=run.path(f"{name}.log"))
    # Tansu waits for open connections on SIGTERM; its data is in memory and thrown away
    # anyway, so SIGKILL comes soon.
    run.own(broker.start, lambda: broker.stop(timeout=3.0))
    return broker


def start_chosen_broker(run: RunContext) -> BrokerProcess:
    """The run's broker (``--broker``): the embedded one, or Apache Kafka, whose figures
    are the ones users get (the embedded broker is slower at fetches and its costs differ)."""
    if run.broker == "embedded":
        return start_broker(run)
    kafka = KafkaBroker(log_path=run.path("kafka.log"), die_with_parent=True)
    run.own(kafka.start, kafka.stop)
    return kafka


def worker_settings(
    bootstrap: str, application_id: str, overrides: Mapping[str, object] | None = None
) -> dict[str, object]:
    settings: dict[str, object] = {
        "application.id": application_id,
        "bootstrap.servers": bootstrap,
        **GROUP_SETTINGS,
    }
    settings.update(overrides or {})
    return settings


def client_settings(bootstrap: str) -> Settings:
    """Settings for the worker's own clients (admin, loaders) against ``bootstrap``: the
    benchmarks create and load topics the way the worker and the demo do."""
    return load(None, {"bootstrap.servers": bootstrap}, environ={}).settings


def new_application_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start_worker(
    run: RunContext,
    name: str,
    settings: Mapping[str, object],
    app: str | None = None,
    state_dir: Path | None = None,
) -> WorkerProcess:
    """Start ``python -m worker start`` with ``settings``; SIGKILLed by PID at the end if alive.

    ``app`` is a ``module:attr`` (modules of this repository are importable: the child
    gets the repository on ``PYTHONPATH``).
    """
    home = run.workdir / name
    worker = WorkerProcess(
        state_dir=state_dir or home / "state",
        http_port=free_port(),
        settings=settings,
        args=["--app", app] if app else [],
        log_path=home / "worker.log",
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        },
        cwd=home,
        name=name,
    )
    return run.own(worker.start, worker.close)


def readyz_tasks(worker: WorkerProcess) -> list[dict[str, Any]]:
    """The tasks ``/readyz`` lists (task_id, kind, state); empty while the worker does not
    answer."""
    try:
        code, body = worker.get("/readyz")
    except OSError:
        return []
    if code not in (200, 503):
        return []
    return list(orjson.loads(body)["tasks"])


def stop_worker(worker: WorkerProcess, timeout: float = 30.0) -> None:
    """SIGTERM and wait; a worker that does not stop in time is SIGKILLed (by its PID)."""
    if worker.alive:
        try:
            worker.terminate(timeout)
        except WorkerProcessFailed:
            worker.close()


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    alive: Sequence[WorkerProcess] = (),
) -> Any:
    """Poll ``condition`` until truthy; fail if the deadline passes or a watched worker dies."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for worker in alive:
            if not worker.alive:
                raise BenchmarkFailed(
                    f"{worker.name} exited with {worker.returncode} while waiting for {what}\n"
                    + worker.log_tail(30)
                )
        if time.monotonic() >= deadline:
            raise BenchmarkFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)  # polling an external process; there is nothing to wait on


def metric_or_zero(worker: WorkerProcess, name: str, **labels: str) -> float:
    """A metric of a worker that may not answer yet (then 0)."""
    try:
        return worker.metric(name, **labels)
    except OSError:
        return 0.0


def side_by_side(calls: Mapping[str, Callable[[], T]]) -> dict[str, T]:
    """Run the calls on daemon threads at once; their results in the calls' order, or
    the first failure raised.

    Joined with a timeout so a signal reaches the main thread at once; if it stops the
    run, the context's clean-up stops every process (the threads then fail fast or die
    with the interpreter: they are daemons).
    """
    results: dict[str, T] = {}
    errors: list[BaseException] = []

    def call(label: str, fn: Callable[[], T]) -> None:
        try:
            results[label] = fn()
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)

    threads = [
        threading.Thread(target=call, args=item, name=item[0], daemon=True)
        for item in calls.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    if errors:
        raise errors[0]
    return {label: results[label] for label in calls}
