"""The processes benchmark alone, in quick mode: two worker processes share the tasks and
the report has both rows, its CPU table and its plots.

The full suite's smoke test runs it too, among every other benchmark; this one is quick
enough to run on its own after a change to it. Quick mode's input is far too small for
the ratio to mean anything, so none is asserted.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
@pytest.mark.duration(95)
def test_quick_run_reports_one_and_two_processes_with_where_the_cores_went(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "processes", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    report = (out / "benchmarks.md").read_text()
    section = report.split("## Every core: 1 worker process against 2", 1)[1]
    assert "records/s, 2 processes against 1" in report
    assert "records/s, 2 processes against raw consume-and-produce" in report
    assert "| #1: 1 process |" in section and "| #2: 2 processes |" in section
    rates = [
        float(line.split("|")[2].replace(",", ""))
        for line in section.splitlines()
        if line.startswith("| #")
    ]
    assert len(rates) == 2 and all(math.isfinite(r) and r > 0 for r in rates), section
    for name in ("processes", "processes-cores"):
        assert (out / "benchmarks" / f"{name}.png").stat().st_size > 0, name
