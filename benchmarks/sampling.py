"""What a benchmark samples of a running worker over time: a probe on a thread at a fixed
interval, and a process's resident memory from /proc.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable


class Sampler:
    """Calls ``probe()`` every ``interval`` seconds on a thread; keeps (monotonic time, value).

    Probes that raise OSError (a worker not answering yet) are skipped.
    """

    def __init__(self, probe: Callable[[], float], interval: float = 0.1) -> None:
        self._probe = probe
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[tuple[float, float]] = []

    def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.samples.append((time.monotonic(), self._probe()))
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def rss_bytes(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS so far) of ``pid`` from /proc, in bytes (Linux)."""
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, amount, _unit = line.split()
                values[key[:-1]] = int(amount) * 1024
    return values["VmRSS"], values["VmHWM"]
