"""The processes benchmark's report, from made-up runs: which stretch each rate covers,
the ratio row, where the cores went and the reading when the target is missed."""

from __future__ import annotations

import string
from pathlib import Path

import pytest

from benchmarks import processes, report
from benchmarks.measure import value_at
from benchmarks.results import PlotPath

TOTAL = 100_000


def plot_path(tmp_path: Path) -> PlotPath:
    return lambda name: tmp_path / f"{name}.png"


def counter(rate: float, start: float = 0.0, head: float = 0.0) -> list[tuple[float, float]]:
    """Every 0.1 s: ``head`` records done by ``start`` (at 10x ``rate``), then ``rate``/s."""
    samples, t, done = [], 0.0, 0.0
    while done < TOTAL:
        done = min(TOTAL, head * t / start if t < start else head + rate * (t - start))
        samples.append((t, done))
        t = round(t + 0.1, 1)
    return samples


def cpu(**cores: float) -> dict[str, list[tuple[float, float]]]:
    """CPU-second samples of each subject using ``cores`` cores for 100 s."""
    return {k: [(0.0, 0.0), (100.0, 100.0 * v)] for k, v in cores.items()}


def run(
    processes_: int, rate: float, cores_used: float, other: float = 0.15, **kw: float
) -> processes.Run:
    usage = cpu(workers=cores_used, broker=0.4, harness=0.05, machine=cores_used + 0.45 + other)
    return processes.Run(processes_, counter(rate, **kw), kw.get("start", 0.0), usage, seconds=1.0)


def test_the_rate_starts_once_every_process_processes_not_at_ten_percent() -> None:
    # 30% of the input was done by one process before the second one got its tasks.
    late = run(2, 40_000, 1.6, start=1.0, head=30_000)

    start, end = late.window(TOTAL)

    assert start == 1.0
    assert value_at(late.processed, end) == pytest.approx(0.9 * TOTAL)
    assert late.rate(TOTAL) == pytest.approx(40_000, rel=0.02)
    assert late.before_window(TOTAL) == pytest.approx(0.30, abs=0.01)


def test_a_run_balanced_before_ten_percent_is_measured_from_ten_percent() -> None:
    early = run(1, 20_000, 1.0)

    assert value_at(early.processed, early.window(TOTAL)[0]) == pytest.approx(0.1 * TOTAL)
    assert early.rate(TOTAL) == pytest.approx(20_000, rel=0.02)


def test_cores_split_the_machine_into_workers_broker_harness_and_other() -> None:
    cores = run(2, 30_000, 1.5).cores(TOTAL)

    assert cores == pytest.approx({"workers": 1.5, "broker": 0.4, "harness": 0.05, "other": 0.15})


def measured(two_rate: float) -> processes.Measured:
    params = processes.Params(payments=TOTAL, accounts=100, pairs=2)
    runs = [
        run(1, 20_000, 1.0),
        run(2, two_rate, 1.5, start=0.5, head=5_000),
        run(2, two_rate * 0.9, 1.5),
        run(1, 18_000, 1.0),
    ]
    return processes.Measured(params, runs, [counter(400_000), counter(500_000)], cpu_count=2)


def test_the_ratio_row_compares_the_best_run_of_each_kind(tmp_path: Path) -> None:
    result = processes.report(measured(32_000), plot_path(tmp_path))

    ratio, ceiling = result.rows
    assert ratio.measured == pytest.approx(32_000, rel=0.02)
    assert ratio.baseline == pytest.approx(20_000, rel=0.02)
    assert ratio.met is True  # 1.6 >= 1.5
    assert ceiling.baseline == pytest.approx(500_000, rel=0.02)
    assert ceiling.target is None
    assert not any("Why the target is missed" in d for d in result.details)
    row = "| #2: 2 processes | 32,000 | 1.50 | 0.40 | 0.05 | 0.15 | 0.00 | 21,333 |"
    assert row in result.details[0]
    assert measured(32_000).pair_ratios() == pytest.approx([1.6, 1.6], rel=0.02)
    assert "| pair 1 | 1.60 | 355,556 |" in result.details[1]
    assert "| pair 2 | 1.60 | 500,000 |" in result.details[1]
    assert not any("Other programs" in d for d in result.details)
    assert {
        f for _, f, _, _ in string.Formatter().parse(report.sections()["processes"]) if f
    } <= set(result.facts)
    assert result.plots == [tmp_path / "processes.png", tmp_path / "processes-cores.png"]
    assert all(p.stat().st_size > 0 for p in result.plots)


def test_a_missed_ratio_is_explained_by_cores_and_work_per_core(tmp_path: Path) -> None:
    result = processes.report(measured(24_000), plot_path(tmp_path))

    assert result.rows[0].met is False
    (why,) = [d for d in result.details if "Why the target is missed" in d]
    # 1.5x of 20,000/s at the 2-process run's 16,000 records per CPU second: 1.875 cores.
    assert "| records per worker CPU second, 2 processes | 16,000 |" in why
    assert "| records per worker CPU second, 1 process | 20,000 |" in why
    assert "| worker cores that rate needed at 2 processes' work per core | 1.88 |" in why
    assert "| worker cores the 2 processes got (1 process got) | 1.50 (1.00) |" in why
    assert "| cores to the broker | 0.40 |" in why and "| cores to nothing (idle) | 0.00 |" in why
    assert why.endswith("Most of the 0.38 cores missing went to the broker.")


def test_outside_load_that_favoured_one_side_is_called_out(tmp_path: Path) -> None:
    runs = [run(1, 15_000, 0.8, other=0.7), run(2, 32_000, 1.7, other=0.0)]
    busy = processes.Measured(
        processes.Params(payments=TOTAL, accounts=100, pairs=1), runs, [counter(400_000)], 2
    )

    reading = processes.report(busy, plot_path(tmp_path)).details[2]

    assert "Other programs used 0.70 cores during the best 1-process run" in reading
    assert "0.00 during the best 2-process run" in reading
    assert "overstates" in reading


def test_a_run_that_balanced_after_ninety_percent_is_measured_with_its_join() -> None:
    late = run(2, 40_000, 1.6, start=1.0, head=95_000)

    assert late.balanced_late(TOTAL)
    start, end = late.window(TOTAL)
    assert value_at(late.processed, start) == pytest.approx(0.1 * TOTAL)
    assert value_at(late.processed, end) == pytest.approx(0.9 * TOTAL)
