"""What a benchmark's report is made of: rows of (measured, baseline, ratio), details, plots.

Each benchmark module measures and reports in two steps: ``measure(ctx, params)`` runs
the workload and returns a plain dataclass of what it observed (numbers, samples, no
prose), and ``report(measured, plot_path)`` turns that into a :class:`Result`: the
summary rows, the markdown details and the plots of ``docs/benchmarks.md``. So the
wording of the report can change, or be tested, without running anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Where the report's PNG called ``name`` goes (``RunContext.plot_path`` in a run).
PlotPath = Callable[[str], Path]


@dataclass(frozen=True, slots=True)
class Target:
    """A goal for a row's ratio (measured / baseline), e.g. ``>= 0.4``; with ``unit``, a
    goal for the measured value itself in that unit, e.g. ``< 5 s`` (issue 8's restart)."""

    op: str  # one of ">=", ">", "<=", "<"
    value: float
    source: str  # where the goal comes from, e.g. "issue 8"
    unit: str | None = None

    def met(self, value: float) -> bool:
        """Whether ``value`` (the ratio, or the measured value when ``unit`` is set) meets it."""
        if math.isnan(value):
            return False
        return {
            ">=": value >= self.value,
            ">": value > self.value,
            "<=": value <= self.value,
            "<": value < self.value,
        }[self.op]

    def __str__(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.op} {self.value:g}{unit} ({self.source})"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the summary table: a measurement against its same-run baseline."""

    metric: str
    measured: float
    measured_label: str
    baseline: float
    baseline_label: str
    unit: str
    target: Target | None = None

    @property
    def ratio(self) -> float:
        return self.measured / self.baseline if self.baseline else math.nan

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        return self.target.met(self.measured if self.target.unit else self.ratio)


@dataclass
class Result:
    """The outcome of one benchmark; ``error`` set (and rows maybe empty) when it failed."""

    name: str
    title: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # markdown blocks, one paragraph each
    plots: list[Path] = field(default_factory=list)  # PNG files written for the report
    # The run's values the benchmark's prose in docs/benchmarks.template.md refers to
    # ({name} placeholders): parameters, sizes, counts. Figures go in rows and tables.
    facts: Mapping[str, object] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    broker: str = "embedded"  # the broker it ran on (benchmarks.harness.BROKERS)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], left: int = 1) -> str:
    """A markdown table; the first ``left`` columns aligned left, the others (figures) right.

    Cells are written with ``str``: format the figures before, as the report shows them.
    """
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * left + "---:|" * (len(headers) - left),
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def interleaved(baselines: Sequence[list[str]], runs: Sequence[list[str]]) -> list[list[str]]:
    """Table rows in the order they ran: a baseline run before each measured run and after
    the last (the same-run baselines of throughput and restore)."""
    rows: list[list[str]] = []
    for i, baseline in enumerate(baselines):
        rows.append(baseline)
        rows += runs[i : i + 1]
    return rows
