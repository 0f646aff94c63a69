"""Run REAL worker processes and observe them from outside: for the tests, the benchmarks
and the demo.

A :class:`WorkerProcess` is one ``python -m worker start`` child with its own state dir,
HTTP port and log file. Its owner watches it only the way an operator would:
``/metrics``, ``/healthz``, ``/readyz``, its exit code and its logs. Signals go to the PID
this object started and to nothing else, so a caller can never hit a process it does not
own.

The same object can be started again after it exited (``start()`` after ``kill()`` or
``terminate()``): same state dir, same port, same log file (appended), new PID. That is
how restart tests run a worker "over its state". With ``http_port=0`` the OS picks the
port of each run and :attr:`WorkerProcess.port` reads it from the run's
``worker.starting`` log line, so nothing needs a particular port to be free.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import IO, Any, Self

from prometheus_client.parser import text_string_to_metric_families

from worker.closing import Closing
from worker.events import WORKER_STARTING

Labels = dict[str, str]
# Series that make no sense summed across label sets.
_NOT_SUMMED = ("_bucket", "_created")
_HTTP_TIMEOUT = 2.0
# Starts the line written to the log before each run (the command): not the worker's.
START_LINE = "--- "
# The bound HTTP port in a run's ``worker.starting`` log line.
_STARTING = re.compile(rb'"event": ?"' + re.escape(WORKER_STARTING.encode()) + rb'"')

# Runs in a child before it execs the real program: on Linux, ask for SIGKILL when the
# parent dies (prctl PR_SET_PDEATHSIG = 1), so even a SIGKILLed parent leaves nothing
# behind. If the parent is already gone by then, do not start at all.
_GUARD = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "except (AttributeError, OSError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class WorkerProcessFailed(AssertionError):
    """A worker process died, or did not answer or stop in time, while its owner waited.

    An AssertionError, so that a test waiting on a worker fails with the log tail it
    carries; the demo and the benchmarks catch it by this name.
    """


def guarded(cmd: Sequence[str]) -> list[str]:
    """``cmd`` started through the parent-death guard (Linux); the PID stays the same
    across the exec, so signalling the PID still reaches the real program."""
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *cmd]


def format_setting(value: object) -> str:
    """A setting value as ``--set`` expects it (booleans lower-case, like TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _text(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


class WorkerProcess(Closing):
    """One worker process started as ``python -m worker start --state-dir DIR --set k=v ...``.

    Not thread-safe. Every method that signals or waits acts on the PID started last by
    this object; ``close()`` (and leaving the ``with`` block) SIGKILLs that PID if it is
    still running and is idempotent. ``die_with_parent`` starts it through
    :func:`guarded`, so it dies with the process that started it (the demo's promise).
    """

    def __init__(
        self,
        state_dir: Path,
        http_port: int,
        settings: Mapping[str, object] | None = None,
        args: Sequence[str] = (),
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        name: str = "worker",
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.state_dir = Path(state_dir)
        self.http_port = http_port
        self.settings: dict[str, object] = {**(settings or {}), "http.port": http_port}
        self.args = list(args)
        self.log_path = Path(log_path) if log_path else self.state_dir.parent / f"{name}.log"
        self.env = dict(env or {})
        self.cwd = Path(cwd) if cwd else self.log_path.parent
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_from = 0  # where the last run's lines start in the (appended) log
        self._port: int | None = http_port or None
        self.pids: list[int] = []

    # -- lifecycle ---------------------------------------------------------------------

    def command(self) -> list[str]:
        """The command line of the worker (without the guard of ``die_with_parent``)."""
        cmd = [sys.executable, "-m", "worker", "start", "--state-dir", str(self.state_dir)]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={format_setting(value)}"]
        return cmd + self.args

    def start(self) -> WorkerProcess:
        """Launch the process (again, if it ran before and exited). Returns self."""
        if self.alive:
            raise RuntimeError(f"{self.name} is already running as pid {self.pid}")
        self._close_log()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.cwd.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
        env.update({"PYTHONUNBUFFERED": "1", **self.env})
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by _close_log()
        self._log_from = self._log.tell()
        self._port = self.http_port or None
        self._log.write(f"{START_LINE}{self.name} start: {' '.join(self.command())}\n".encode())
        self._log.flush()
        # Its own session: a Ctrl-C in the terminal reaches the owner, which stops its
        # workers in order, instead of reaching every process at once.
        self._proc = subprocess.Popen(
            guarded(self.command()) if self.die_with_parent else self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cwd,
            env=env,
            start_new_session=True,
        )
        self.pids.append(self._proc.pid)
        return self

    @property
    def pid(self) -> int | None:
        """PID of the process started last (None before the first start)."""
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit code of the last run; None while running or before the first start."""
        return self._proc.poll() if self._proc else None

    def request_stop(self) -> None:
        """SIGTERM the PID if it still runs, without waiting: the caller stops several
        workers at once and waits for them together."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGTERM)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM the PID, wait up to ``timeout`` and return the exit code.

        A process that outlives the timeout is SIGKILLed and WorkerProcessFailed raised: a
        worker must stop within its grace period.
        """
        proc = self._require_started()
        if proc.poll() is None:
            self.request_stop()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise WorkerProcessFailed(
                    f"{self.name} (pid {proc.pid}) did not exit within {timeout}s of SIGTERM"
                    f"\n{self.log_tail()}"
                ) from None
        self._close_log()
        return proc.returncode

    def kill(self) -> int:
        """SIGKILL the PID (the crash of fault tests), reap it, return the exit code (-9)."""
        proc = self._require_started()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self._close_log()
        return proc.returncode

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit on its own (e.g. a bad config) and return its code."""
        proc = self._require_started()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WorkerProcessFailed(
                f"{self.name} (pid {proc.pid}) still running after {timeout}s\n{self.log_tail()}"
            ) from None
        self._close_log()
        return proc.returncode

    def close(self) -> None:
        """SIGKILL the PID this object started if it still runs. Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self.kill()
        self._close_log()

    def __enter__(self) -> Self:
        if self._proc is None:
            self.start()
        return self

    # -- HTTP ----------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The HTTP port of the last run: ``http_port``, or with ``http_port=0`` the one the
        OS picked, read from the run's ``worker.starting`` log line (None until then)."""
        if self._port is None and self._proc is not None:
            with suppress(OSError), self.log_path.open("rb") as log:
                log.seek(self._log_from)
                for line in log:
                    if _STARTING.search(line):
                        with suppress(ValueError, KeyError, TypeError):
                            self._port = int(json.loads(line)["http_port"])
                            break
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``; raises OSError while the port is not known yet."""
        port = self.port
        if port is None:
            raise OSError(f"{self.name} has not reported its HTTP port yet")
        return f"http://127.0.0.1:{port}"

    def get(self, path: str, timeout: float = _HTTP_TIMEOUT) -> tuple[int, bytes]:
        """GET ``path`` on the worker's HTTP port: (status, body). Non-2xx is not an error.

        Raises OSError (URLError) when nothing answers.
        """
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def metric_samples(self, name: str | None = None) -> list[tuple[str, Labels, float]]:
        """Every sample of ``/metrics`` as (sample name, labels, value), optionally one name.

        Sample names are the exposed ones: ``worker_commits_total``,
        ``worker_commit_seconds_count``, ``worker_tasks``.
        """
        status, body = self.get("/metrics")
        if status != 200:
            raise WorkerProcessFailed(f"{self.name}: /metrics answered {status}")
        return [
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
            if name is None or sample.name == name
        ]

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {sample name: value summed over all label sets}.

        ``_bucket`` and ``_created`` series are left out (their sums mean nothing).
        Raises OSError when the process does not answer.
        """
        totals: dict[str, float] = {}
        for sample_name, _labels, value in self.metric_samples():
            if not sample_name.endswith(_NOT_SUMMED):
                totals[sample_name] = totals.get(sample_name, 0.0) + value
        return totals

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels`` (0.0 if none).

        ``worker.metric("worker_tasks", kind="active")``.
        """
        return sum(
            value
            for _name, sample_labels, value in self.metric_samples(name)
            if all(sample_labels.get(k) == v for k, v in labels.items())
        )

    def ready(self) -> bool:
        """True when ``/readyz`` answers 200 (every active task running)."""
        return self._status("/readyz") == 200

    def healthy(self) -> bool:
        return self._status("/healthz") == 200

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll ``/readyz`` until 200; return the seconds it took. Fails fast if the process dies."""
        return self._wait(self.ready, timeout, "/readyz to answer 200")

    def wait_healthy(self, timeout: float = 30.0) -> float:
        return self._wait(self.healthy, timeout, "/healthz to answer 200")

    def wait_for_metric(
        self,
        name: str,
        predicate: Callable[[float], bool],
        timeout: float = 60.0,
        **labels: str,
    ) -> float:
        """Wait until ``predicate(metric(name, **labels))`` holds; return that value.

        Tolerates the HTTP server not being up yet; fails at once if the process exits.
        """
        seen: list[float] = []

        def check() -> bool:
            try:
                value = self.metric(name, **labels)
            except OSError:
                return False
            seen.append(value)
            return predicate(value)

        self._wait(check, timeout, lambda: f"{name} {labels or ''} (last seen: {seen[-1:]})")
        return seen[-1]

    # -- logs ----------------------------------------------------------------------------

    def logs(self) -> str:
        """Everything the process (every run of it) wrote to stdout and stderr."""
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        tail = self.logs().splitlines()[-lines:]
        return f"--- last {len(tail)} log lines of {self.name} ({self.log_path}):\n" + "\n".join(
            tail
        )

    def log_events(self) -> list[dict[str, Any]]:
        """The structlog JSON lines of the logs, parsed; other lines are skipped."""
        events = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        return events

    # -- internals -----------------------------------------------------------------------

    def _require_started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._proc

    def _status(self, path: str) -> int | None:
        try:
            return self.get(path)[0]
        except OSError:
            return None

    def _wait(
        self, condition: Callable[[], bool], timeout: float, what: str | Callable[[], str]
    ) -> float:
        proc = self._require_started()
        start = time.monotonic()
        deadline = start + timeout
        while True:
            if condition():
                return time.monotonic() - start
            if proc.poll() is not None:
                raise WorkerProcessFailed(
                    f"{self.name} (pid {proc.pid}) exited with {proc.returncode} while waiting"
                    f" for {_text(what)}\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise WorkerProcessFailed(
                    f"timed out after {timeout}s waiting for {self.name} {_text(what)}"
                    f"\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _close_log(self) -> None:
        log, self._log = self._log, None
        if log is not None:
            log.close()

    def __repr__(self) -> str:
        return f"WorkerProcess({self.name!r}, pid={self.pid}, port={self.port})"
