"""The shutdown deadline: once a stop is requested the process exits within ``shutdown.timeout.ms``.

A clean stop (stop fetching, commit, write ``.checkpoint`` files, leave the group, close
the clients) normally takes a second or two. When something hangs instead (a broker that
stopped answering, a processor stuck in user code, a client that will not close), the
operator's supervisor would otherwise wait for its own kill timeout. The watchdog ends
the process itself, with exit code 1 and an error log line, ``shutdown.timeout.ms`` after
the stop was requested. Whatever was committed is safe: a dirty exit loses nothing that a
``kill -9`` would not (the next start restores the changelog tail).

One daemon thread, started with the worker. It waits on the worker's stop event (so it
is woken the moment a signal handler sets it, never polled), then waits the timeout for
:meth:`ShutdownWatchdog.finish`. The CLI never calls ``finish``: the process is expected
to be gone, interpreter exit included, before the deadline, and the watchdog also
catches an exit that hangs after the worker's ``run()`` returned. Embedders that keep
the process alive after ``run()`` call ``finish``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from worker.events import WORKER_SHUTDOWN_TIMEOUT
from worker.observability import get_logger

EXIT_SHUTDOWN_TIMEOUT = 1
_FINISH_CHECK_SECONDS = 1.0  # how often an idle watchdog notices finish() before any stop


class ShutdownWatchdog:
    """Exits the process if it still runs ``timeout_s`` after ``stop`` was set.

    Thread-safety: ``start`` and ``finish`` may be called from any thread. ``exit`` is
    injectable for tests (default :func:`os._exit`, which skips clean-up handlers that
    might be what hangs).
    """

    def __init__(
        self,
        stop: threading.Event,
        timeout_s: float,
        exit: Callable[[int], object] = os._exit,  # noqa: A002 (the function it replaces)
    ) -> None:
        self._stop = stop
        self.timeout_s = timeout_s
        self._exit = exit
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="shutdown-watchdog", daemon=True)
        self._log = get_logger(component="shutdown")

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        """The shutdown completed (or the worker will never stop): stand down."""
        self._finished.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _watch(self) -> None:
        while not self._stop.wait(_FINISH_CHECK_SECONDS):
            if self._finished.is_set():
                return
        requested = time.monotonic()
        if self._finished.wait(self.timeout_s):
            return
        self._log.error(
            WORKER_SHUTDOWN_TIMEOUT,
            timeout_ms=int(self.timeout_s * 1000),
            waited_s=round(time.monotonic() - requested, 3),
            exit_code=EXIT_SHUTDOWN_TIMEOUT,
        )
        sys.stderr.flush()
        self._exit(EXIT_SHUTDOWN_TIMEOUT)
