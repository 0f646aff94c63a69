"""Where a worker's time goes: ``py-spy record`` of the process, summarised per function.

The worker is sampled from outside (py-spy reads its memory; nothing in the worker
changes) in py-spy's raw format: one line per distinct stack, ``frame;frame;... count``,
root first. :func:`summarise` turns that into the share of the processing thread's
samples spent in each function, inclusive (the function and everything it called) and
self (the function's own code, C calls it makes included).

By hand: ``py-spy record -o profile.svg --pid PID`` (a flame graph) or
``py-spy dump --pid PID`` (the stacks right now).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benchmarks.harness import REPO, RunContext
from worker.dev.processes import WorkerProcess

# A frame as py-spy writes it: "function (path/to/file.py:line)"; line may be missing.
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")
# The processing loop's thread; the HTTP and librdkafka threads are left out.
PROCESSING_THREAD = "MainThread"


class PySpy:
    """``py-spy record`` of one PID in raw format; stopped by its own PID. Idempotent stop."""

    def __init__(self, ctx: RunContext, pid: int, out: Path, rate: int = 100) -> None:
        self.out = out
        self._pid = pid
        self._rate = rate
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        ctx.own(self._start, self.stop)

    def _start(self) -> None:
        out, pid, rate = self.out, self._pid, self._rate
        out.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("py-spy")),
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--threads",
                "--output",
                str(out),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGINT (py-spy then writes its output), SIGKILL if it does not exit in time."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None:
            self._log.close()


def attach(ctx: RunContext, worker: WorkerProcess, name: str) -> PySpy:
    """Start sampling ``worker`` into ``<workdir>/profiles/<name>.txt``."""
    assert worker.pid is not None
    return PySpy(ctx, worker.pid, ctx.path("profiles", f"{name}.txt"))


@dataclass(frozen=True)
class HotLine:
    """One source line and the share of samples spent in it (its own code and the C
    functions it calls, e.g. librdkafka inside ``consume()``)."""

    location: str  # package/file.py:line
    function: str
    code: str  # the line's source text, as it was when summarised
    share: float


@dataclass(frozen=True)
class Summary:
    """Shares of the samples under ``within`` in the processing thread, largest first.

    ``samples`` counts the busy samples under ``within`` (py-spy leaves out idle ones:
    a thread blocked in a system call, e.g. waiting for the broker); ``share`` is their
    part of all busy samples of the processing thread (start-up and joins are the rest).
    """

    within: str
    samples: int
    share: float
    inclusive: list[tuple[str, float]]  # function -> share, itself and what it calls
    hot_lines: list[HotLine]  # the innermost line of each sample


@dataclass(frozen=True)
class _Frame:
    path: str  # shortened: package/file.py
    file: str  # as py-spy wrote it
    function: str
    line: int | None

    @property
    def name(self) -> str:
        return f"{self.path}:{self.function}"


def parse_frame(frame: str) -> _Frame:
    """``function (path/to/file.py:line)`` as py-spy writes it."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return _Frame(frame.strip(), "", frame.strip(), None)
    file = match.group("file")
    parts = Path(file).parts
    path = Path(file).name
    for anchor in (
        "worker",
        "benchmarks",
        "confluent_kafka",
        "rocksdict",
        "kafka",
        "prometheus_client",
    ):
        if anchor in parts:
            path = "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor) :])
            break
    line = match.group("line")
    return _Frame(path, file, match.group("func"), int(line) if line else None)


Sources = dict[str, list[str]]


def snapshot_sources() -> Sources:
    """This repository's Python modules as lines, keyed by their path relative to it.

    Taken right before a profiled worker starts, so the report quotes the lines that
    process imported even if the tree is edited while the benchmark runs.
    """
    found: Sources = {}
    for package in ("worker", "benchmarks"):
        for path in (REPO / package).rglob("*.py"):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                found[path.relative_to(REPO).as_posix()] = path.read_text().splitlines()
    return found


def _source(file: str, line: int | None, sources: Sources) -> str:
    if line is None:
        return ""
    with contextlib.suppress(OSError, IndexError, UnicodeDecodeError):
        text = sources.get(file)
        if text is None:
            text = Path(file).read_text().splitlines()
        return text[line - 1].strip()
    return ""


def summarise(
    raw: Path,
    within: str,
    sources: Sources | None = None,
    top: int = 12,
    thread: str = PROCESSING_THREAD,
) -> Summary:
    """Inclusive shares of each function called under the frame ``within`` (a function
    name such as ``Worker._run_loop``) in ``thread``'s samples, and the hottest lines.
    ``sources`` (:func:`snapshot_sources`) quotes the lines as the process loaded them.

    Raises FileNotFoundError if py-spy wrote nothing, ValueError if no sample was taken.
    """
    inclusive: Counter[str] = Counter()
    lines: Counter[_Frame] = Counter()
    total = busy = 0
    for entry in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = entry.rpartition(" ")
        frames = stack.split(";")
        if not count_text.isdigit() or len(frames) < 2 or thread not in frames[0]:
            continue
        count = int(count_text)
        busy += count
        parsed = [parse_frame(f) for f in frames[1:]]  # frames[0] is the thread
        start = next((i for i, f in enumerate(parsed) if f.function == within), None)
        if start is None or start == len(parsed) - 1:
            continue
        below = parsed[start + 1 :]
        total += count
        for name in {f.name for f in below}:
            inclusive[name] += count
        lines[below[-1]] += count
    if not total:
        raise ValueError(f"{raw}: no samples under {within!r} in thread {thread!r}")
    return Summary(
        within=within,
        samples=total,
        share=total / busy,
        inclusive=[(n, c / total) for n, c in inclusive.most_common(top)],
        hot_lines=[
            HotLine(
                f"{f.path}:{f.line}", f.function, _source(f.file, f.line, sources or {}), c / total
            )
            for f, c in lines.most_common(top)
        ],
    )


@dataclass(frozen=True)
class Category:
    """A kind of work, recognised by the stack of a sample.

    A sample belongs to the first category that claims it: ``under`` names a function
    anywhere below ``within`` (``"TaskCommitter.commit"``), ``leaf_functions`` the innermost
    frame's function, ``leaf_files`` a path suffix of the innermost frame's file, and
    ``leaf_code`` words in the innermost line's source text (the line that was running,
    C calls it makes included).
    """

    label: str
    under: tuple[str, ...] = ()
    leaf_functions: tuple[str, ...] = ()
    leaf_files: tuple[str, ...] = ()
    leaf_code: tuple[str, ...] = ()

    def claims(self, below: list[_Frame], code: str) -> bool:
        leaf = below[-1]
        return (
            any(f.function in self.under for f in below)
            or leaf.function in self.leaf_functions
            or any(leaf.path.endswith(suffix) for suffix in self.leaf_files)
            or any(word in code for word in self.leaf_code)
        )


def breakdown(
    raw: Path,
    within: str,
    categories: list[Category],
    sources: Sources | None = None,
    rest: str = "everything else",
    thread: str = PROCESSING_THREAD,
) -> list[tuple[str, float]]:
    """The share of ``thread``'s busy samples under ``within`` in each category, in the
    order given, then ``rest`` for the samples no category claimed.

    Raises ValueError if no sample was taken under ``within``.
    """
    counts: Counter[str] = Counter()
    total = 0
    for entry in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = entry.rpartition(" ")
        frames = stack.split(";")
        if not count_text.isdigit() or len(frames) < 2 or thread not in frames[0]:
            continue
        parsed = [parse_frame(f) for f in frames[1:]]
        start = next((i for i, f in enumerate(parsed) if f.function == within), None)
        if start is None:
            continue
        below = parsed[start:]
        count = int(count_text)
        total += count
        leaf = below[-1]
        code = _source(leaf.file, leaf.line, sources or {})
        label = next((c.label for c in categories if c.claims(below, code)), rest)
        counts[label] += count
    if not total:
        raise ValueError(f"{raw}: no samples under {within!r} in thread {thread!r}")
    return [(c.label, counts[c.label] / total) for c in categories] + [(rest, counts[rest] / total)]


def markdown(summary: Summary, title: str) -> str:
    """The summary as a paragraph and two markdown tables (one block of the report)."""
    lines = [
        f"{title}: {summary.samples:,} busy samples of the processing thread under "
        f"`{summary.within}` ({summary.share:.0%} of its busy samples; py-spy at 100 Hz, "
        "idle time left out).",
        "",
        "| hottest lines (own time, C calls included) | code | share |",
        "|---|---|---:|",
    ]
    for hot in summary.hot_lines:
        code = hot.code.replace("|", "\\|")
        lines.append(f"| `{hot.location}` {hot.function} | `{code}` | {hot.share:.0%} |")
    lines += ["", "| function, with everything it calls | share |", "|---|---:|"]
    for name, share in summary.inclusive:
        lines.append(f"| `{name}` | {share:.0%} |")
    return "\n".join(lines)
