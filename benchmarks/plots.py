"""The report's PNG plots (matplotlib, headless Agg backend). Each function writes one file
and returns its path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.profiling import Summary

Samples = Sequence[tuple[float, float]]
MiB = 1024 * 1024


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def progress(path: Path, title: str, series: Mapping[str, Samples], total: float) -> Path:
    """Records done over seconds since each series started, one line per series."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for label, samples in series.items():
        if not samples:
            continue
        t0 = samples[0][0]
        ax.plot([t - t0 for t, _ in samples], [c for _, c in samples], label=label, lw=1.8)
    ax.axhline(total, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("seconds since the first sample")
    ax.set_ylabel("records")
    ax.set_title(title)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def scale_out(
    path: Path,
    gaps: Mapping[str, Sequence[Mapping[str, float]]],
    timelines: Mapping[str, Mapping[str, Sequence[float]]],
) -> Path:
    """Left: the longest stall per task for each mode (mean of the runs, the bar's
    whiskers their range). Right: each task's changelog writes over time in the first
    run of each mode (a mark per record; the blank stretches are the stalls)."""
    plt = _pyplot()
    modes = list(gaps)
    tasks = sorted({t for runs in gaps.values() for per_task in runs for t in per_task})
    fig, (bars, lines) = plt.subplots(
        1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1.6]}
    )
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(tasks))]
        per_task = [[run.get(t, 0.0) for run in gaps[mode]] for t in tasks]
        means = [sum(v) / len(v) for v in per_task]
        spread = [[m - min(v) for m, v in zip(means, per_task, strict=True)],
                  [max(v) - m for m, v in zip(means, per_task, strict=True)]]  # fmt: skip
        bars.bar(xs, means, width=width, label=mode, yerr=spread, capsize=3)
        for x, m, v in zip(xs, means, per_task, strict=True):
            bars.text(x, max(v) + 0.1, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
    bars.set_xticks(range(len(tasks)), tasks)
    bars.set_xlabel("task")
    bars.set_ylabel("longest gap between changelog writes (s)")
    bars.set_title("Longest processing stall per task")
    bars.legend()
    bars.grid(axis="y", alpha=0.3)
    ticks, labels = [], []
    for i, mode in enumerate(modes):
        for j, task in enumerate(tasks):
            y = i * (len(tasks) + 1) + j
            stamps = timelines[mode].get(task, [])
            lines.scatter(stamps, [y] * len(stamps), s=30, marker="|", lw=0.6, color=f"C{i}")
            ticks.append(y)
            labels.append(f"{mode}: {task}")
    lines.axvline(0.0, color="black", lw=0.8, ls="--")
    lines.set_yticks(ticks, labels, fontsize=7)
    lines.set_xlabel("seconds since the second worker was started")
    lines.set_title("Changelog writes per task, first run of each mode")
    lines.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def memory_budget(
    path: Path,
    samples: Samples,
    bound: int,
    rocksdb_bound: int,
    idle: float,
    marks: Mapping[str, float],
) -> Path:
    """RSS over time against idle + the worker's whole configured bound, and idle + RocksDB's."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if samples:
        t0 = samples[0][0]
        ax.plot([t - t0 for t, _ in samples], [v / MiB for _, v in samples], label="worker RSS")
        for label, at in marks.items():
            ax.axvline(at - t0, color="grey", lw=0.8, ls=":")
            ax.text(at - t0, ax.get_ylim()[1] * 0.02, " " + label, rotation=90, fontsize=8)
    ax.axhline(idle / MiB, color="grey", ls="-.", label="idle RSS")
    ax.axhline((idle + bound) / MiB, color="C3", ls="--", label="idle RSS + configured bound")
    ax.axhline(
        (idle + rocksdb_bound) / MiB, color="C2", ls=":", label="idle RSS + rocksdb.memory.bytes"
    )
    ax.set_xlabel("seconds since launch")
    ax.set_ylabel("MiB")
    ax.set_title("Memory of one worker with 64 tasks")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def profile(path: Path, summaries: Mapping[str, Summary]) -> Path:
    """The hottest lines of each profiled run, one panel per run."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(summaries), 1, figsize=(9, 3.6 * len(summaries)), squeeze=False)
    for ax, (title, summary) in zip(axes[:, 0], summaries.items(), strict=True):
        hot = summary.hot_lines[::-1]
        ax.barh([f"{h.location} {h.function}" for h in hot], [h.share * 100 for h in hot])
        ax.set_xlabel(f"% of busy samples under {summary.within} (the line itself and C it calls)")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def comparison(
    path: Path, title: str, rows: Sequence[tuple[str, float, float]], labels: tuple[str, str]
) -> Path:
    """Grouped bars: each row's measured value beside its same-run baseline."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows), 3.4))
    axes = list(axes) if len(rows) > 1 else [axes]
    for ax, (metric, measured, baseline) in zip(axes, rows, strict=True):
        ax.bar([labels[0], labels[1]], [measured, baseline], color=["#3b7dd8", "#b0b0b0"])
        ax.set_title(metric, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def restart(
    path: Path,
    sizes_mib: Sequence[float],
    first_record: Mapping[str, Sequence[float]],
    all_tasks: Mapping[str, Sequence[float]],
    phases: Mapping[str, Sequence[tuple[str, float]]],
    target: float,
    largest: str,
) -> Path:
    """Left: launch to first record against the state size, one line per kind of launch
    (dotted: to all tasks running), with the target. Right: where the seconds go at the
    largest size, one stacked bar per kind of launch."""
    plt = _pyplot()
    fig, (lines, bars) = plt.subplots(
        1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [1.2, 1]}
    )
    for i, (label, seconds) in enumerate(first_record.items()):
        lines.plot(sizes_mib, seconds, marker="o", lw=1.8, color=f"C{i}", label=label)
        lines.plot(sizes_mib, all_tasks[label], ls=":", lw=1.2, color=f"C{i}")
    lines.axhline(target, color="C3", ls="--", lw=0.9, label=f"target < {target:g} s")
    lines.set_xlabel("local state on disk (MiB)")
    lines.set_ylabel("seconds from launch")
    lines.set_title("Launch to first processed record (dotted: to all tasks running)")
    lines.set_ylim(bottom=0)
    lines.legend(loc="upper left", fontsize=8)
    lines.grid(alpha=0.3)
    labels = list(phases)
    names = [name for name, _ in next(iter(phases.values()), [])]
    left = [0.0] * len(labels)
    for j, name in enumerate(names):
        widths = [max(0.0, phases[label][j][1]) for label in labels]
        bars.barh(labels, widths, left=left, label=name, color=f"C{j + 4}")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    bars.axvline(target, color="C3", ls="--", lw=0.9)
    bars.invert_yaxis()
    bars.set_xlabel("seconds from launch to first record")
    bars.set_title(f"Where the seconds go, {largest}")
    bars.legend(loc="lower right", fontsize=8)
    bars.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def availability_timeline(
    path: Path,
    title: str,
    gaps: Mapping[str, Sequence[tuple[float, float]]],
    owners: Mapping[str, Sequence[tuple[float, str | None]]],
    events: Sequence[tuple[float, str]],
    span: tuple[float, float],
    stalled: float,
) -> Path:
    """One row per task: its silent stretches in the output as bars (red: longer than
    ``stalled``), over a thin band coloured by the worker that owned it; membership
    events as vertical lines."""
    plt = _pyplot()
    tasks = sorted(gaps)
    workers = sorted({w for spans in owners.values() for _, w in spans if w is not None})
    palette = ["C0", "C2", "C4", "C9", "C8", "C6"]  # not the gaps' orange and red
    colour = {w: palette[i % len(palette)] for i, w in enumerate(workers)}
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(tasks) + 1.8))
    for y, task in enumerate(tasks):
        spans = list(owners.get(task, []))
        for (since, who), (until, _) in zip(spans, [*spans[1:], (span[1], None)], strict=True):
            if who is not None and until > since:
                ax.broken_barh(
                    [(since, until - since)], (y - 0.42, 0.12), color=colour[who], alpha=0.8
                )
        for start, end in gaps.get(task, []):
            long = end - start > stalled
            ax.broken_barh(
                [(start, end - start)], (y - 0.25, 0.5), color="C3" if long else "C1", alpha=0.85
            )
            if long:
                ax.text((start + end) / 2, y, f"{end - start:.1f}", ha="center", va="center",
                        fontsize=7, color="white")  # fmt: skip
    for at, label in events:
        ax.axvline(at, color="black", lw=0.8, ls="--")
        ax.text(at, 1.01, label, transform=ax.get_xaxis_transform(), fontsize=7, rotation=20)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color="C3", alpha=0.85),
        plt.Rectangle((0, 0), 1, 1, color="C1", alpha=0.85),
        *(plt.Rectangle((0, 0), 1, 1, color=colour[w], alpha=0.8) for w in workers),
    ]
    labels = [f"no output > {stalled:g} s", "no output 0.5-1.5 s", *(f"owner {w}" for w in workers)]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_yticks(range(len(tasks)), tasks)
    ax.set_ylim(-0.6, len(tasks) - 0.4)
    ax.set_xlim(*span)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the input started")
    ax.set_title(f"{title}: silent stretches in each task's output", pad=22)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def availability_shares(
    path: Path, events: Mapping[str, Sequence[tuple[str, float, float]]], stalled: float
) -> Path:
    """Per membership event, the share of tasks that stalled beside the share that
    changed owner (the target: the first never above the second), one panel per scenario."""
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, len(events), figsize=(3.6 * len(events) + 1, 3.8), squeeze=False, sharey=True
    )
    for ax, (scenario, rows) in zip(axes[0], events.items(), strict=True):
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [100 * s for _, s, _ in rows], width=0.4,
               color="C3", label=f"stalled > {stalled:g} s")  # fmt: skip
        ax.bar([x + 0.2 for x in xs], [100 * m for _, _, m in rows], width=0.4,
               color="C0", label="changed owner")  # fmt: skip
        ax.set_xticks(list(xs), [label for label, _, _ in rows], rotation=45, ha="right",
                      fontsize=7)  # fmt: skip
        ax.set_title(scenario, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("% of tasks")
    axes[0][0].set_ylim(0, 105)
    axes[0][-1].legend(fontsize=8)
    return _save(fig, path)


def cores(path: Path, title: str, runs: Mapping[str, Mapping[str, float]], cpu_count: int) -> Path:
    """One stacked horizontal bar per run: the cores each part used, the rest idle."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(runs) + 1.6))
    labels = list(runs)
    parts = list(dict.fromkeys(part for used in runs.values() for part in used))
    left = [0.0] * len(labels)
    for part in parts:
        widths = [runs[label].get(part, 0.0) for label in labels]
        ax.barh(labels, widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.axvline(cpu_count, color="grey", lw=0.8, ls=":")
    ax.invert_yaxis()
    ax.set_xlabel(f"cores (the machine has {cpu_count})")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def stacked(path: Path, title: str, bars: Mapping[str, Mapping[str, float]], unit: str) -> Path:
    """Horizontal bars split into labelled parts (the same part labels share a colour)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.7 * len(bars)))
    colours: dict[str, Any] = {}
    palette = plt.get_cmap("tab10")
    for row, parts in enumerate(bars.values()):
        left = 0.0
        for part, value in parts.items():
            label = None if part in colours else part  # once in the legend
            colour = colours.setdefault(part, palette(len(colours) % 10))
            ax.barh(row, value, left=left, color=colour, label=label)
            left += value
    ax.set_yticks(range(len(bars)), list(bars), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def churn(path: Path, title: str, rows: Sequence[tuple[float, float, float, float]]) -> Path:
    """A store under a churn of keys: ``(records in, changelog records, changelog live
    keys, RocksDB MiB)`` per sample; counts on the left axis, MiB on the right."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    done = [r[0] for r in rows]
    ax.plot(done, [r[1] for r in rows], label="changelog records", lw=1.8)
    ax.plot(done, [r[2] for r in rows], label="changelog live keys", lw=1.8)
    ax.set_yscale("log")  # a million records beside a few thousand live keys
    ax.set_xlabel("records in (distinct keys)")
    ax.set_ylabel("records, keys (log)")
    ax.grid(alpha=0.3)
    disk = ax.twinx()
    disk.plot(done, [r[3] for r in rows], label="RocksDB MiB", color="grey", lw=1.2, ls="--")
    disk.set_ylabel("RocksDB MiB on disk")
    disk.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = disk.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left")
    ax.set_title(title)
    return _save(fig, path)


def against(
    path: Path,
    title: str,
    xlabel: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    ylabel: str,
    right: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    right_label: str = "",
) -> Path:
    """Lines with markers, y against x, one per series; ``right`` on a second y axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for label, points in series.items():
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label, lw=1.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if right:
        other = ax.twinx()
        for label, points in right.items():
            xs, ys = [x for x, _ in points], [y for _, y in points]
            other.plot(xs, ys, marker=".", ls="--", lw=1.2, color="grey", label=label)
        other.set_ylabel(right_label)
        other.set_ylim(bottom=0)
        more = other.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, loc="upper left", fontsize=8)
    ax.set_title(title)
    return _save(fig, path)
