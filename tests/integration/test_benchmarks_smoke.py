"""The benchmark suite runs end to end in quick mode and writes a complete report.

Only the plumbing is checked here (every benchmark ran, every row has numbers, the plots
exist): quick-mode workloads are far too small for the numbers to mean anything, so no
result is asserted. ``make bench`` runs the real workloads.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARK_NAMES

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# A cell such as "12,345 records/s (example app, 1 worker)" or "0.52 s (warmups on)".
NUMBER = re.compile(r"^-?[\d,]+(\.\d+)? ")
EXPECTED_ROWS = {
    "Scale-out": ["longest per-task stall"],
    "Availability through membership changes": [
        *(
            f"{scenario}: {metric}"
            for scenario in ("rolling restart", "scale-out", "kill -9")
            for metric in (
                "longest stall of a task that kept its owner",
                "share of tasks stalled > 1.5 s per event (mean)",
            )
        ),
        "a moved task with a standby, warmup or local copy: stall against its handover",
    ],
    "Processing throughput": ["processing, records/s"],
    "Count and sum per key: small and large key spaces": [
        "records/s, small key space",
        "records/s, large key space",
    ],
    "Per-record CPU in one process: the worker against the same work by hand": [
        "CPU per record, us (in one process, records fetched beforehand)"
    ],
    "Every core: 1 worker process against 2": [
        "records/s, 2 processes against 1",
        "records/s, 2 processes against raw consume-and-produce",
    ],
    "Restore": ["restore, records/s"],
    "Memory": ["peak RSS", "RSS growth over idle"],
    "Initial standbys: restart over local state": [
        "join to first processed record",
        "launch to first processed record",
        "peak RSS, restart over 64 task directories",
        "peak RSS, 64 task directories, against the bound",
    ],
    "Restart over local state": [
        "launch to first record after a clean stop",
        "launch to first record after a kill -9",
    ],
    "Spark table load (account-profiles) vs a plain producer": [
        "rows/s, whole job (files -> aggregate -> checks -> write)",
        "rows/s, write phase only",
    ],
    "Scans and TTL": [
        "scan, pairs/s",
        "scan with uncommitted writes, pairs/s",
        "TTL sweep, µs per expired key",
        "TTL store under a churn of distinct keys: changelog live keys",
    ],
}


def _summary_rows(report: str) -> dict[str, list[str]]:
    """benchmark title: metric -> the row's cells, from the summary table."""
    section = report.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        match = re.match(r"^\| \[(?P<title>[^\]]+)\]\([^)]*\)(?::\s*(?P<metric>[^|]+))? \|", line)
        if match:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            key = f"{match.group('title')}: {(match.group('metric') or '').strip()}"
            rows[key] = cells[1:]
    return rows


# ~180 s alone before the count-and-sum and processes benchmarks joined (~40 s more);
# 202-234 s in `make test` then, where it shares two cores with five other test
# processes (nothing here asserts a duration). The timeouts only catch a hang, with room
# for a loaded machine.
@pytest.mark.timeout(600)
@pytest.mark.duration(280)
def test_quick_run_writes_a_report_with_a_number_in_every_row(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    report = (out / "benchmarks.md").read_text()
    rows = _summary_rows(report)
    expected = {f"{t}: {m}" for t, metrics in EXPECTED_ROWS.items() for m in metrics}
    assert set(rows) == expected, report
    for key, (measured, baseline, ratio, _target, _met) in rows.items():
        assert NUMBER.match(measured), f"{key}: measured {measured!r}"
        assert NUMBER.match(baseline), f"{key}: baseline {baseline!r}"
        value = float(ratio.replace(",", ""))
        assert math.isfinite(value) and value > 0, f"{key}: ratio {ratio!r}"
        # The ratio is computed from the two measurements shown, not typed in.
        shown = float(measured.split()[0].replace(",", "")) / float(
            baseline.split()[0].replace(",", "")
        )
        assert value == pytest.approx(shown, rel=0.05, abs=0.02), key

    for label in ("CPU", "RAM", "Python", "confluent-kafka", "librdkafka", "rocksdict"):
        assert re.search(rf"^\| {label} \| \S", report, re.M), label
    assert re.search(r"^\| kafka-python \| \d", report, re.M)
    assert re.search(r"^\| broker \| tansu \d", report, re.M)
    for name in BENCHMARK_NAMES:
        assert (out / "benchmarks" / f"{name}.png").stat().st_size > 0, name
        assert f"(benchmarks/{name}.png)" in report
