"""A Spark test that hits pytest's timeout leaves no JVM behind.

A pytest run in a subprocess runs one test that submits a Spark job
(``worker spark submit --master local[1]``, whose export waits on a broker that is not
there) through :func:`tests.support.process_groups.run_group`, the way the cluster test
submits its jobs, and times out while the job's JVM runs. The run uses the project's own
pytest settings (pytest-timeout's ``signal`` method). Once it is over, no process of the
job may be left: before, ``subprocess.run`` killed only ``worker spark submit`` and its
spark-submit JVM lived on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

pytest.importorskip("pyspark", reason="the spark extra is not installed (make install has it)")

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
INNER_TIMEOUT_S = 20

INNER = """
import sys

import pytest

from tests.support.process_groups import run_group


@pytest.mark.timeout({timeout})
def test_a_spark_job_outlasting_the_test():
    run_group(
        [sys.executable, "-m", "worker", "spark", "submit", "--master", "local[1]", "--",
         "export", "account-profiles", "--to", {out!r},
         "--set", "bootstrap.servers=127.0.0.1:1"],
        timeout=400,
    )
"""


def processes_naming(marker: str) -> dict[int, str]:
    """Live processes whose command line contains ``marker``: PID -> command line."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found[int(entry)] = cmdline
    return found


@pytest.mark.duration(30)
def test_a_spark_test_that_times_out_leaves_no_jvm_behind(tmp_path: Path) -> None:
    marker = f"timed-out-{uuid.uuid4().hex}"
    out = str(tmp_path / marker / "out.parquet")
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(INNER.format(timeout=INNER_TIMEOUT_S, out=out)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(inner)]
    run = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_until(
            lambda: any("java" in cmd for cmd in processes_naming(marker).values()),
            INNER_TIMEOUT_S,
            interval=0.2,
            message="the job's JVM running",
        )
        output, _ = run.communicate(timeout=INNER_TIMEOUT_S + 30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "Timeout" in output and "1 failed" in output, output[-3000:]
    left = processes_naming(marker)
    assert not left, f"left behind by the timed-out test: {left}"
