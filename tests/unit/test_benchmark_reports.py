"""Benchmark reports are made from measurements alone: no broker, no worker, no run.

``measure`` returns plain dataclasses and ``report`` turns them into the rows, details and
plots of ``docs/benchmarks.md``; these tests hand ``report`` made-up measurements and
check what the summary table would show.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest

from benchmarks import count_sum, per_record, report, spark_load, throughput
from benchmarks.results import PlotPath, Result


def plot_path(tmp_path: Path) -> PlotPath:
    return lambda name: tmp_path / f"{name}.png"


def writes_its_template_section(result: Result) -> bool:
    """Whether the result has every fact its section of docs/benchmarks.template.md asks for."""
    asked = {f for _, f, _, _ in string.Formatter().parse(report.sections()[result.name]) if f}
    return asked <= set(result.facts)


def linear(rate: float, total: int) -> list[tuple[float, float]]:
    """Samples of a counter that grows at ``rate`` a second up to ``total``, every 0.1 s."""
    return [(i / 10, min(total, rate * i / 10)) for i in range(int(10 * total / rate) + 2)]


def test_throughput_compares_the_best_worker_run_with_the_best_ceiling(tmp_path: Path) -> None:
    params = throughput.Params(payments=10_000, accounts=100, runs=2)
    measured = throughput.Measured(
        params,
        ceilings=[linear(40_000, 10_000), linear(50_000, 10_000), linear(20_000, 10_000)],
        workers=[(linear(10_000, 10_000), 3.0), (linear(25_000, 10_000), 2.0)],
        profile=None,
    )

    result = throughput.report(measured, plot_path(tmp_path))

    (row,) = result.rows
    assert row.measured == pytest.approx(25_000, rel=0.05)
    assert row.baseline == pytest.approx(50_000, rel=0.05)
    assert row.met is True  # at least 0.30 of the ceiling, the target
    assert "| worker run 1 | 10,000 | 3.0 |\n| ceiling 2 | 50,000 |  |" in result.details[0]
    assert writes_its_template_section(result)
    assert result.plots == [tmp_path / "throughput.png"]
    assert result.plots[0].stat().st_size > 0


def test_count_sum_holds_the_target_against_the_large_key_space_only(tmp_path: Path) -> None:
    params = count_sum.Params(records=10_000, key_spaces=(100, 2_000))
    small = count_sum.KeySpace(
        100, [linear(40_000, 10_000)], linear(30_000, 10_000), 2.0, None, 4, 0.2
    )
    large = count_sum.KeySpace(
        2_000, [linear(50_000, 10_000), linear(40_000, 10_000)], linear(5_000, 10_000), 3.0,
        None, 5, 0.6,
    )  # fmt: skip

    result = count_sum.report(count_sum.Measured(params, [small, large]), plot_path(tmp_path))

    by_metric = {row.metric: row for row in result.rows}
    assert by_metric["records/s, small key space"].target is None
    large_row = by_metric["records/s, large key space"]
    assert large_row.measured == pytest.approx(5_000, rel=0.05)
    assert large_row.baseline == pytest.approx(50_000, rel=0.05)  # the better ceiling
    assert large_row.met is False  # 0.10 of the ceiling, the target 0.20
    (spaces,) = result.details
    assert "| 4 | 0.20 | 0.05 | 10% |" in spaces  # 4 commits of 0.2 s over a 2 s run
    assert "| 5 | 0.60 | 0.12 | 20% |" in spaces
    assert writes_its_template_section(result)
    assert result.plots == [tmp_path / "count_sum.png"]


def test_per_record_compares_the_least_cpu_of_each_way_and_splits_the_workers(
    tmp_path: Path,
) -> None:
    params = per_record.Params(payments=1_000, accounts=10, reps=3)
    measured = per_record.Measured(
        params,
        worker=[6.0, 5.0, 7.0],
        worker_commit=[0.3, 0.2, 0.4],
        noop=[1.5, 1.2, 1.4],
        by_hand=[2.5, 3.0, 2.0],
    )

    result = per_record.report(measured, plot_path(tmp_path))

    (row,) = result.rows
    assert (row.measured, row.baseline, row.target) == (5.0, 2.0, None)
    assert row.ratio == pytest.approx(2.5)
    # The least worker run's own commit share (0.2) is the one subtracted: 5.0 - 2.0 - 0.2.
    runs, parts = result.details
    assert "| worker, a processor doing nothing | 1.50 | 1.20 | 1.40 |" in runs
    assert "| the app's own work (by hand) | 2.00 | 40% |" in parts
    assert "| commits | 0.20 | 4% |" in parts
    assert "| the worker's own per-record path | 2.80 | 56% |" in parts
    assert writes_its_template_section(result)
    assert result.plots == [tmp_path / "per_record.png"]
    assert result.plots[0].stat().st_size > 0


def test_spark_load_rows_compare_the_snapshot_and_the_export_with_plain_clients(
    tmp_path: Path,
) -> None:
    measured = spark_load.Measured(
        keys=1_000,
        first_seconds=3.0,
        snapshot_rows=990,
        snapshot_seconds=2.0,
        snapshot_write_seconds=0.5,
        snapshot_written=110,
        snapshot_deletes=10,
        baseline_write_seconds=0.25,
        export_rows=990,
        export_seconds=1.0,
        read_records=1_110,
        read_seconds=0.5,
        total_seconds=10.0,
    )

    result = spark_load.report(measured, plot_path(tmp_path))

    snapshot, written, export = result.rows
    assert (snapshot.measured, snapshot.baseline) == (495.0, 3_960.0)
    assert (written.measured, written.baseline) == (110, 990)
    assert (export.measured, export.baseline) == (990.0, 2_220.0)
    assert "| snapshot load: writing | 0.5 |" in result.details[0]
    assert result.facts["upserts"] == 100 and result.facts["tombstones"] == 10
    assert writes_its_template_section(result)
    assert result.plots[0].stat().st_size > 0
