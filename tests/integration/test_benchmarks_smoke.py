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
# benchmark -> (its title in the report, the metrics of its summary rows)
EXPECTED_ROWS: dict[str, tuple[str, list[str]]] = {
    "scale_out": ("Scale-out", ["longest per-task stall"]),
    "availability": (
        "Availability through membership changes",
        [
            # Quick mode runs the exactly-once scenarios only.
            *(
                f"{scenario}, exactly-once: {metric}"
                for scenario in ("rolling restart", "scale-out", "kill -9")
                for metric in (
                    "longest stall of a task that kept its owner",
                    "share of tasks stalled > 1.5 s per event (mean)",
                )
            ),
            "exactly_once_v2: longest stall of a moved task with a copy, handed over",
            "exactly_once_v2: longest stall of a moved task with a copy, its owner killed",
        ],
    ),
    "throughput": ("Processing throughput", ["processing, records/s"]),
    "count_sum": (
        "Count and sum per key: small and large key spaces",
        ["records/s, small key space", "records/s, large key space"],
    ),
    "per_record": (
        "Per-record CPU in one process: the worker against the same work by hand",
        ["CPU per record, us (in one process, records fetched beforehand)"],
    ),
    "processes": (
        "Every core: 1 worker process against 2",
        [
            "records/s, 2 processes against 1",
            "records/s, 2 processes against raw consume-and-produce",
        ],
    ),
    "restore": ("Restore", ["restore, records/s"]),
    "memory": ("Memory", ["peak RSS", "RSS growth over idle"]),
    "initial_standbys": (
        "Initial standbys: restart over local state",
        [
            "join to first processed record",
            "launch to first processed record",
            "peak RSS, restart over 64 task directories",
            "peak RSS, 64 task directories, against the bound",
        ],
    ),
    "restart": (
        "Restart over local state",
        [
            "launch to first record after a clean stop",
            "launch to first record after a kill -9",
        ],
    ),
    "spark_load": (
        "Spark snapshot load and export (account-profiles) vs plain clients",
        [
            "rows/s, snapshot load (read back, compare, write changes)",
            "records written for the snapshot",
            "rows/s, export of the store to Parquet",
        ],
    ),
    "scale": (
        "The group at scale: plan time and metadata bytes",
        [
            "plan, 100 instances x 1,000 tasks",
            "group metadata (subscriptions + assignments), 100 instances x 1,000 tasks",
            "group metadata, 100 instances x 1,000 tasks, against the previous format",
        ],
    ),
    "scans_ttl": (
        "Scans and TTL",
        [
            "scan, pairs/s",
            "scan with uncommitted writes, pairs/s",
            "a stream punctuator scanning the store, pairs/s",
            "TTL sweep, µs per expired key",
            "TTL store under a churn of distinct keys: changelog live keys",
        ],
    ),
    "windowed": (
        "Windowed count and sum: tumbling minutes, emit on update",
        ["records/s, tumbling minutes, emit on update"],
    ),
    "windowed_final": (
        "Windowed count and sum: tumbling minutes, emit final",
        [
            "records/s, 20-minute span",
            "final results/s, 20-minute span",
            "peak RSS, most open windows against fewest",
            "RocksDB on disk, most open windows against fewest",
        ],
    ),
    "windowed_retention": (
        "Windowed store with hourly retention over hours of event time",
        [
            "RocksDB on disk, later against the hour after the first retention period",
            "changelog records held, later against the hour after the first retention period",
        ],
    ),
    "windowed_restore": (
        "Windowed store restores: the tail after kill -9, live windows from nothing",
        [
            "after kill -9: records restored against the changelog",
            "cold restore: records written against the changelog",
            "cold restore: windows in the stores against those inside retention before",
        ],
    ),
    "dsl_cost": (
        "The DSL's cost: a count per key against the Processor API, and a repartition hop",
        [
            "CPU per record, count per key",
            "input records/s, count per key after a re-key",
            "worker CPU per input record, count per key after a re-key",
        ],
    ),
    "join_cost": (
        "Stream-table joins against the hand-written lookup they replace",
        [
            "CPU per record, stream-table join, latest value",
            "CPU per record, stream-table join, versioned table as of the record's time",
            "CPU per record, versioned join reading into history",
            "versioned store history sweep, CPU per key pruned",
        ],
    ),
    "join_windows": (
        "Stream-stream join: records/s and store size against the window",
        [
            # Quick mode: windows of ±5 s and ±30 s.
            "join buffer entries at the end, window ±5 s",
            "records/s, window ±30 s",
            "join buffer entries at the end, window ±30 s",
        ],
    ),
    "kafka_streams": (
        "Against Kafka Streams: the same topologies on the same Kafka broker",
        [
            # Quick mode runs at-least-once only.
            f"{what}, {topology}, at_least_once"
            for topology in ("count and sum", "tumbling minutes, emit on update")
            for what in ("records/s", "CPU per record")
        ],
    ),
}
# Benchmarks whose report has no plot (a table of sizes says it all).
PLOTLESS = {"scale", "dsl_cost", "join_cost", "join_windows"}
# Seconds each quick run takes in a whole `make test`, roughly: the longest start first
# (tests/support/scheduling.py).
DURATIONS = {
    "spark_load": 150,
    "availability": 150,
    "scale_out": 90,
    "kafka_streams": 90,
    "restart": 70,
}


def test_every_benchmark_has_its_expected_rows() -> None:
    assert set(EXPECTED_ROWS) == set(BENCHMARK_NAMES)


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


# Each benchmark runs in its own process so the suite's workers share them out; the
# timeouts only catch a hang, with room for a loaded machine.
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.duration(DURATIONS.get(n, 45))) for n in BENCHMARK_NAMES],
)
def test_a_quick_run_writes_a_report_with_a_number_in_every_row(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", name, "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    report = (out / "benchmarks.md").read_text()
    rows = _summary_rows(report)
    title, metrics = EXPECTED_ROWS[name]
    assert set(rows) == {f"{title}: {m}" for m in metrics}, report
    for key, (measured, baseline, ratio, _target, _met) in rows.items():
        assert NUMBER.match(measured), f"{key}: measured {measured!r}"
        assert NUMBER.match(baseline), f"{key}: baseline {baseline!r}"
        value = float(ratio.replace(",", ""))
        # 0 where nothing was measured against a baseline (no task stalled, say).
        assert math.isfinite(value) and value >= 0, f"{key}: ratio {ratio!r}"
        # The ratio is computed from the two measurements shown, not typed in.
        shown = float(measured.split()[0].replace(",", "")) / float(
            baseline.split()[0].replace(",", "")
        )
        assert value == pytest.approx(shown, rel=0.05, abs=0.02), key

    for label in ("CPU", "RAM", "Python", "confluent-kafka", "librdkafka", "rocksdict"):
        assert re.search(rf"^\| {label} \| \S", report, re.M), label
    assert re.search(r"^\| kafka-python \| \d", report, re.M)
    assert re.search(r"^\| broker \| tansu \d", report, re.M)
    if name not in PLOTLESS:
        assert (out / "benchmarks" / f"{name}.png").stat().st_size > 0, name
        assert f"(benchmarks/{name}.png)" in report
