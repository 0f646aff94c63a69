"""The fixed text of docs/benchmarks.md lives once, in its template; reports give figures."""

from __future__ import annotations

import datetime as dt
import string
from pathlib import Path

import pytest

from benchmarks import BENCHMARK_NAMES, memory, report, restart
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
