"""Loopback ports that no two tests of one run are ever given, even across xdist workers.

``free_port()`` asks the kernel for a port that is free *now*; the process that will listen
on it (a broker, a worker's HTTP server) binds it a second or so later, and a worker
restarted over its state binds the same port again after a kill. Under ``pytest -n N``
another xdist worker's ``free_port()`` may be handed that port in between (the kernel
picks at random among ~14,000 free ports, and picks again among ports freed a moment
ago). So every port a test uses comes from :class:`PortRegistry`: the registry keeps one
file per port handed out in a directory shared by every xdist worker of the run and
creates it with ``O_EXCL``, so a port is given out once per run, whichever process asks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.dev.broker import free_port


class PortRegistry:
    """Hands out free loopback ports, each at most once per test run (across processes)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def take(self) -> int:
        """A port free right now that no other test of this run was given."""
        while True:
            port = free_port()
            try:
                (self.directory / str(port)).open("x").close()
            except FileExistsError:
                continue
            return port


def run_directory(factory: pytest.TempPathFactory) -> Path:
    """A directory every process of this run shares: the base temp dir of a plain run;
    under xdist, the parent of the per-worker ones (``.../pytest-N/popen-gwK``)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
