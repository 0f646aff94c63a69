"""pytest plugin: ``worker_factory`` starts real worker processes and always cleans them up.

Registered from tests/conftest.py (``pytest_plugins``). Each test gets its own factory:

    def test_two_workers_share_the_tasks(worker_factory):
        a = worker_factory("a")
        b = worker_factory("b")
        a.wait_ready(60); b.wait_ready(60)
        assert a.metric("worker_tasks", kind="active") + b.metric(...) == 8

Every worker of one test shares the factory's ``application_id`` (one group, one set of
changelog topics, unique to the test) and gets its own HTTP port (from the run's
``ports`` registry: never given to another test, even under xdist) and state dir under
the test's tmp dir. ``bootstrap.servers`` defaults to the session broker, which is only
started when a worker needs it. At teardown every process the factory started is
SIGKILLed by its PID; when the test failed, the tail of each worker's log is attached to
the report.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.ports import PortRegistry
from worker.dev.processes import WorkerProcess

# Settings that make group membership quick on the test broker (see platform-facts.md:
# joins hang with librdkafka's default max.poll.interval.ms as rebalance timeout).
TEST_DEFAULTS: dict[str, object] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "max.poll.interval.ms": 10000,
}


class WorkerFactory:
    """Creates WorkerProcess objects for one test and remembers every one for cleanup."""

    def __init__(self, request: pytest.FixtureRequest, base_dir: Path) -> None:
        self._request = request
        self.base_dir = base_dir
        self.application_id = f"test-{uuid.uuid4().hex[:10]}"
        self.workers: list[WorkerProcess] = []
        self._bootstrap: str | None = None
        self._ports: PortRegistry = request.getfixturevalue("ports")

    @property
    def bootstrap(self) -> str:
        """The session broker's address (starting it on first use)."""
        if self._bootstrap is None:
            self._bootstrap = str(self._request.getfixturevalue("bootstrap"))
        return self._bootstrap

    def __call__(
        self,
        name: str | None = None,
        *,
        settings: Mapping[str, object] | None = None,
        args: Sequence[str] = (),
        state_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        start: bool = True,
    ) -> WorkerProcess:
        """A worker with a fresh HTTP port; started unless ``start=False``.

        ``settings`` override the defaults (application id, bootstrap, TEST_DEFAULTS) and
        go to ``--set``. ``state_dir`` defaults to ``<tmp>/<name>/state``; pass another
        worker's ``state_dir`` to run a new process over existing state. ``args`` are
        appended to the command line (e.g. ``["--app", "module:attr"]``).
        """
        name = name or f"worker-{len(self.workers)}"
        if any(w.name == name for w in self.workers):
            raise ValueError(f"a worker called {name!r} exists in this test already")
        merged: dict[str, object] = {"application.id": self.application_id, **TEST_DEFAULTS}
        merged.update(settings or {})
        if "bootstrap.servers" not in merged:
            merged["bootstrap.servers"] = self.bootstrap
        home = self.base_dir / name
        process = WorkerProcess(
            state_dir=state_dir or home / "state",
            http_port=self._ports.take(),
            settings=merged,
            args=args,
            log_path=home / "worker.log",
            env=env,
            cwd=home,
            name=name,
        )
        self.workers.append(process)
        return process.start() if start else process

    def log_tails(self, lines: int = 60) -> str:
        return "\n\n".join(worker.log_tail(lines) for worker in self.workers)

    def close(self) -> None:
        """SIGKILL every still-running process this factory started, keeping the first error."""
        first: Exception | None = None
        for worker in self.workers:
            try:
                worker.close()
            except Exception as exc:  # clean up the rest, then re-raise the first
                first = first or exc
        if first is not None:
            raise first


@pytest.fixture
def worker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(request, tmp_path / "workers")
    try:
        yield factory
    finally:
        factory.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the workers' log tails to the report of a failed test that used them."""
    report = yield
    if report.when == "call" and report.failed:
        factory = getattr(item, "funcargs", {}).get("worker_factory")
        if isinstance(factory, WorkerFactory) and factory.workers:
            report.sections.append(("worker logs", factory.log_tails()))
    return report
