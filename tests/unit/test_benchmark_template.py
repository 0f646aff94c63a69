"""The fixed text of docs/benchmarks.md lives once, in its template; reports give figures."""

from __future__ import annotations

import datetime as dt
import string
from pathlib import Path

import pytest

from benchmarks import BENCHMARK_NAMES, report, restart
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

    asked = {f for _, f, _, _ in string.Formatter().parse(report.sections()["restart"]) if f}
    assert asked <= set(result.facts)
    page = report.render([result], RUN, tmp_path)
    assert "| after a clean stop | 4.40 | yes | 1.40 | 4.40-4.40 |" in page
    assert "| 512 MiB | cold restore | 1,000 | 7.50 |" in page
