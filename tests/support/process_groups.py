"""Commands run as a process group of their own, stopped whole by the PID they started with.

``worker spark submit`` starts spark-submit (a JVM), which starts the job's Python in turn.
``subprocess.run`` kills only its direct child on a timeout or any exception, so a test
that timed out (pytest-timeout raises inside the wait: its ``signal`` method, pinned in
pyproject.toml) orphaned the JVM, which outlived the test run. :func:`run_group` kills the
group on every way out of the wait; the direct child also dies with the test process
(:func:`worker.dev.processes.guarded`), should that be killed outright.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress

from worker.dev.processes import guarded


def run_group(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end (text output captured) like ``subprocess.run``, in a new
    session; then, or on its timeout (TimeoutExpired) or any exception, SIGKILL whatever
    of its process group is left."""
    process = subprocess.Popen(
        guarded(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        kill_group(process.pid)
        process.wait()
    return subprocess.CompletedProcess(list(argv), process.returncode, stdout, stderr)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group ``pgid`` (a no-op once none is left)."""
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
