"""The fixed text of docs/benchmarks.md lives once, in its template; reports give figures."""

from __future__ import annotations

import datetime as dt
import string
from pathlib import Path

import pytest

from benchmarks import (
    BENCHMARK_NAMES,
    initial_standbys,
    memory,
    report,
    restart,
    restore,
    scans_ttl,
)
from benchmarks.results import Result

RUN = report.RunInfo(dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 60.0, False, 0.5, 0.6, "make bench")


def test_every_section_of_the_template_is_a_benchmark_or_a_part_of_the_page() -> None:
    names = set(report.sections())
    assert {"intro", "how to run"} <= names
    assert sorted(names - {"intro", "how to run"} - set(BENCHMARK_NAMES)) == []


def test_a_benchmark_section_is_written_with_the_facts_of_its_run(tmp_path: Path) -> None:
    blocks = {"intro": "How to read.", "how to run": "## How to run", "demo": "{n:,} keys."}
    result = Result("demo", "Demo", details=["| a |\n|---|"], facts={"n": 12000})

    page = report.render([result], RUN, tmp_path, blocks)

    assert "How to read." in page and "## How to run" in page
    assert "## Demo\n\n12,000 keys.\n\n| a |" in page


def test_a_fact_the_template_asks_for_and_the_report_lacks_names_the_section(
    tmp_path: Path,
) -> None:
    blocks = {"demo": "{n} keys in {missing}."}
    with pytest.raises(report.TemplateError, match="'demo'.*missing"):
        report.render([Result("demo", "Demo", facts={"n": 1})], RUN, tmp_path, blocks)


def asked(name: str) -> set[str]:
    """The facts the template's section ``name`` refers to."""
    return {f for _, f, _, _ in string.Formatter().parse(report.sections()[name]) if f}


def launch(first: float, join: float = 3.0, restored: int = 0) -> restart.Launch:
    return restart.Launch(1000, first, 0.5, 0.6, join, first - 4.1, first + 0.2, restored, 0.2, 1)


def test_restart_reports_tables_and_gives_every_fact_its_section_asks_for(
    tmp_path: Path,
) -> None:
    steps = [
        restart.Step(
            mib * restart.MiB,
            9.0,
            0.3,
            13_000,
            {
                "clean stop": launch(4.4),
                "kill -9": launch(4.6),
                "cold restore": launch(7.5, restored=9),
            },
        )  # fmt: skip
        for mib in (256, 512)
    ]
    measured = restart.Measured(restart.FULL, steps)

    result = restart.report(measured, lambda name: tmp_path / f"{name}.png")

    assert asked("restart") <= set(result.facts)
    page = report.render([result], RUN, tmp_path)
    assert "| after a clean stop | 4.40 | yes | 1.40 | 4.40-4.40 |" in page
    assert "| 512 MiB | cold restore | 1,000 | 7.50 |" in page


def test_memory_reports_each_run_and_where_the_growth_went_as_tables(tmp_path: Path) -> None:
    mib = memory.MiB
    run = memory.WorkerRun(
        128 * mib, 300 * mib, 380 * mib, 2 * mib, 10 * mib, 60 * mib, 20 * mib, 30.0, 4.5, [], {}
    )
    measured = memory.Measured(memory.FULL, run, None)

    result = memory.report(measured, lambda name: tmp_path / f"{name}.png")

    assert asked("memory") <= set(result.facts)
    runs, growth = result.details
    assert "| defaults | 128 MiB | 300 MiB | 380 MiB | 80 MiB | 0.62x | 1.25x | 2.0 MiB |" in runs
    assert "| of the growth: the rest | 26 MiB |" in growth


def test_initial_standbys_reports_every_run_as_a_row(tmp_path: Path) -> None:
    timing = initial_standbys.Timing
    measured = initial_standbys.Measured(
        initial_standbys.FULL,
        1_000_000,
        2**30,
        {True: [timing(4.1, 0.12, 300 * 2**20)], False: [timing(5.2, 1.3, 310 * 2**20)]},
        {True: 200 * 2**20, False: 190 * 2**20},
    )

    result = initial_standbys.report(measured, lambda name: tmp_path / f"{name}.png")

    assert asked("initial_standbys") <= set(result.facts)
    (runs,) = result.details
    assert "| on | 4.10 | 0.120 | 300 |" in runs and "| off | 5.20 | 1.300 | 310 |" in runs


def test_restore_reports_runs_in_order_tasks_and_steady_rates_as_tables(tmp_path: Path) -> None:
    def counter(rate: float, total: int) -> list[tuple[float, float]]:
        return [(i / 10, min(total, rate * i / 10)) for i in range(int(10 * total / rate) + 2)]

    total = 100_000
    per_task = {"0_0": (60_000, 0.5), "0_1": (40_000, 0.3)}
    restored = restore.Restored(total, 0.5, per_task, counter(200_000, total))
    measured = restore.Measured(
        restore.QUICK, total, [counter(400_000, total), counter(500_000, total)], [restored], None
    )

    result = restore.report(measured, lambda name: tmp_path / f"{name}.png")

    assert asked("restore") <= set(result.facts)
    runs, tasks, _steady = result.details
    assert [line.split(" |")[0] for line in runs.splitlines()[2:]] == [
        "| raw read 1",
        "| worker restore 1",
        "| raw read 2",
    ]
    assert "| worker restore 1 | 0.50 | 200,000 |" in runs
    assert "| 0_0 | 60,000 | 0.50 |" in tasks


def test_scans_ttl_reports_the_scan_runs_and_the_churn_over_time(tmp_path: Path) -> None:
    params = scans_ttl.Params(keys=100, sweep_keys=10, churn=2000, chunks=2, runs=2)
    measured = scans_ttl.Measured(
        params,
        {"raw iterator": [0.01, 0.02], "view": [0.04, 0.05], "view, 10% buffered": [0.05, 0.06]},
        0.001,
        0.0001,
        [
            scans_ttl.Sample(1000, 2 * 2**20, 1500, 300, 700),
            scans_ttl.Sample(2000, 2 * 2**20, 3500, 310, 1690),
        ],
        620,
        {"punctuator scan": [0.05, 0.04], "raw iterator": [0.02, 0.01]},
    )

    result = scans_ttl.report(measured, lambda name: tmp_path / f"{name}.png")

    assert asked("scans_ttl") <= set(result.facts)
    assert [row.measured for row in result.rows][:2] == [2500, 2000]
    scans, churn = result.details
    assert "| view | 40 | 50 | 2,500 |" in scans
    assert "| punctuator scan (punctuation run) | 50 | 40 | 2,500 |" in scans
    assert [row.measured for row in result.rows][2] == 2500  # the punctuator's scan, pairs/s
    assert "| 2,000 | 2.0 | 3,500 | 310 | 1,690 |" in churn
