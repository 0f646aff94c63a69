"""Scale-out: the longest stretch any task stops processing when a second worker joins,
warmups on versus off (issue 3's must-show; issue 8, item 4).

Each mode gets its own broker and the same workload:

1. The example app's state is seeded: the profiles table and an ``account-totals``
   changelog with ``versions`` records per account (``accounts`` keys); the first worker
   starts over an empty state dir and restores all of it.
2. Payments flow at a steady ``rate``; the first worker commits every 100 ms, so every
   task writes to its changelog partition about ten times a second.
3. The second worker starts. With warmups (``max.warmup.replicas=2``) it first warms up
   copies of the two tasks it should own while the first keeps processing; a probing
   rebalance then moves them. Without (``max.warmup.replicas=0``) the two tasks move at
   once and restore cold on the newcomer.
4. Once both workers run two active tasks each (no warmups left), payments continue for
   a few seconds more; then the changelog is read back.

The stall of a task is the longest gap between consecutive record timestamps of its
changelog partition inside that window (from starting the second worker to the end),
the window's edges included: output-side evidence, whoever owned the task. The ratio is
*on / off*; below 1 means warmups shortened the worst stall.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from functools import partial

from benchmarks import plots
from benchmarks.harness import (
    RunContext,
    new_application_id,
    readyz_tasks,
    side_by_side,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import SteadyProducer, read_timestamps
from benchmarks.log_events import log_time, starts_join
from benchmarks.measure import gap_intervals, max_gap
from benchmarks.results import PlotPath, Result, Row, Target, table
from benchmarks.workload import (
    EXAMPLE_PARTITIONS,
    accounts,
    load_example_state,
    payment_records,
    totals_changelog,
)
from worker.dev.processes import WorkerProcess
from worker.events import MEMBERSHIP_ASSIGNED, RESTORE_DONE
from worker.examples import payments as app
from worker.processing import timestamps

NAME = "scale_out"
TITLE = "Scale-out"
TASKS = [f"{s}_{p}" for s in (0, 1) for p in range(EXAMPLE_PARTITIONS)]  # scoring, joins
MODES = {"warmups on": 2, "warmups off": 0}


@dataclass(frozen=True)
class Params:
    accounts: int
    versions: int
    rate: int  # payments per second during the scale-out
    acceptable_recovery_lag: int = 1000
    commit_interval_ms: int = 100
    warm_seconds: float = 3.0  # steady processing before the second worker starts
    settle_seconds: float = 3.0  # after the scale-out finished, still in the window
    timeout: float = 180.0
    repeats: int = 2  # runs per mode, alternating on/off; the row compares their means
    # Run both modes at the same time (each has its own broker). Only for the smoke
    # test's tiny workload: with real load the modes would slow each other down.
    parallel_modes: bool = False

    @property
    def state_records(self) -> int:
        return self.accounts * (self.versions + 1)


FULL = Params(accounts=1_000_000, versions=3, rate=2000)
QUICK = Params(
    accounts=5_000,
    versions=1,
    rate=500,
    warm_seconds=1.0,
    settle_seconds=1.0,
    repeats=1,
    parallel_modes=True,
)


@dataclass
class ModeOutcome:
    gaps: dict[str, float]  # task -> longest stall (s)
    timeline: dict[str, list[float]]  # task -> changelog write times (s since the join)
    stalls: dict[str, list[tuple[float, float]]]  # task -> stalls over 1 s (s since join)
    rebalances: dict[str, list[float]]  # worker -> durations (s) of its joins in the window
    settled_after: float  # s from starting the second worker to balanced
    restored_on_newcomer: float
    warmups_caught_up: float
    newcomer_restore_seconds: float  # longest restore.done of the newcomer's actives
    warmup_seconds: float | None  # newcomer's first assignment to its warmup probe request


@dataclass(frozen=True)
class Measured:
    """Every run of both modes, in the order they were labelled."""

    params: Params
    outcomes: dict[str, ModeOutcome]  # run label -> what it observed
    modes: dict[str, str]  # run label -> its mode (a key of MODES)

    def by_mode(self) -> dict[str, list[ModeOutcome]]:
        return {
            mode: [self.outcomes[label] for label, m in self.modes.items() if m == mode]
            for mode in MODES
        }


def measure(ctx: RunContext, params: Params) -> Measured:
    """Run each mode ``repeats`` times, alternating (side by side in quick mode)."""
    labels = [
        (f"{mode} #{i + 1}" if params.repeats > 1 else mode, mode)
        for i in range(params.repeats)
        for mode in MODES
    ]
    if params.parallel_modes:
        outcomes = side_by_side(
            {label: partial(_run_mode, ctx, params, label, MODES[mode]) for label, mode in labels}
        )
    else:
        outcomes = {label: _run_mode(ctx, params, label, MODES[mode]) for label, mode in labels}
    return Measured(params, outcomes, dict(labels))


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """The row (mean worst stall, warmups on against off), the runs' table and the plot."""
    params, outcomes = measured.params, measured.outcomes
    result = Result(NAME, TITLE)
    by_mode = measured.by_mode()
    worst = {mode: [max(o.gaps.values()) for o in runs] for mode, runs in by_mode.items()}
    result.rows.append(
        Row(
            metric="longest per-task stall",
            measured=statistics.mean(worst["warmups on"]),
            measured_label="warmups on",
            baseline=statistics.mean(worst["warmups off"]),
            baseline_label="warmups off",
            unit="s",
            target=Target("<", 1.0, "issue 3: warmups remove the gap"),
        )
    )
    result.facts = {
        "accounts": params.accounts,
        "changelog_records": params.accounts * params.versions,
        "cold_records": params.state_records // 2,
        "rate": params.rate,
        "commit_interval_ms": params.commit_interval_ms,
        "acceptable_recovery_lag": params.acceptable_recovery_lag,
        "repeats": params.repeats,
    }
    result.details += [_reading(by_mode), _mode_table(outcomes)]
    result.plots.append(
        plots.scale_out(
            plot_path(NAME),
            {mode: [o.gaps for o in runs] for mode, runs in by_mode.items()},
            {mode: runs[0].timeline for mode, runs in by_mode.items()},
        )
    )
    return result


def _reading(by_mode: dict[str, list[ModeOutcome]]) -> str:
    """Per mode: each run's longest stall, and what bounds it (a join, a cold restore)."""
    rows = [
        [mode, ", ".join(f"{max(o.gaps.values()):.2f}" for o in runs)]
        + [f"{max(max(o.gaps.values()) for o in runs):.1f}"]
        + [f"{max((d for o in runs for s in o.rebalances.values() for d in s), default=0.0):.1f}"]
        + [f"{max(o.newcomer_restore_seconds for o in runs):.1f}"]
        for mode, runs in by_mode.items()
    ]
    headers = ["mode", "each run's longest stall (s)", "worst stall (s)"]
    headers += ["longest join to assignment (s)", "newcomer's longest restore as an active (s)"]
    return table(headers, rows)


def _mode_table(outcomes: dict[str, ModeOutcome]) -> str:
    lines = [
        "| | " + " | ".join(outcomes) + " |",
        "|---|" + "---:|" * len(outcomes),
        "| longest stall per task (s) | "
        + " | ".join(
            ", ".join(f"{t} {g:.1f}" for t, g in sorted(o.gaps.items())) for o in outcomes.values()
        )
        + " |",
        "| stalls over 1 s, from the second worker's start (s) | "
        + " | ".join(
            "; ".join(
                f"{t}: " + ", ".join(f"{a:.1f}-{b:.1f}" for a, b in spans)
                for t, spans in sorted(o.stalls.items())
                if spans
            )
            or "none"
            for o in outcomes.values()
        )
        + " |",
        "| rebalances in the window, join to assignment (s) | "
        + " | ".join(
            "; ".join(
                f"{who}: " + (", ".join(f"{d:.1f}" for d in spans) or "none")
                for who, spans in o.rebalances.items()
            )
            for o in outcomes.values()
        )
        + " |",
        "| records the newcomer restored as an active | "
        + " | ".join(f"{o.restored_on_newcomer:,.0f}" for o in outcomes.values())
        + " |",
        "| warmups caught up (newcomer) | "
        + " | ".join(f"{o.warmups_caught_up:.0f}" for o in outcomes.values())
        + " |",
        "| newcomer's longest restore as an active, `restore.done` (s) | "
        + " | ".join(f"{o.newcomer_restore_seconds:.1f}" for o in outcomes.values())
        + " |",
        "| warmup: first assignment to the probing request (s) | "
        + " | ".join(
            "-" if o.warmup_seconds is None else f"{o.warmup_seconds:.1f}"
            for o in outcomes.values()
        )
        + " |",
        "| second worker start to balanced (s) | "
        + " | ".join(f"{o.settled_after:.1f}" for o in outcomes.values())
        + " |",
    ]
    return "\n".join(lines)


def _run_mode(ctx: RunContext, params: Params, label: str, warmups: int) -> ModeOutcome:
    tag = label.replace(" ", "-").replace("#", "")
    broker = start_broker(ctx, f"broker-{tag}")
    bootstrap = broker.bootstrap
    app_id = new_application_id(f"bench-scale-{tag}")
    accts = accounts(params.accounts)
    seeded = load_example_state(bootstrap, app_id, accts, params.versions)
    settings = worker_settings(
        bootstrap,
        app_id,
        {
            "commit.interval.ms": params.commit_interval_ms,
            "num.standby.replicas": 0,
            "max.warmup.replicas": warmups,
            "acceptable.recovery.lag": params.acceptable_recovery_lag,
            # Stalls are silences in the changelog's timestamps: stamp writes when made.
            "timestamp.extractor": timestamps.WALL_CLOCK,
        },
    )
    first = start_worker(ctx, f"{tag}-first", settings)
    first.wait_ready(params.timeout)
    payments = SteadyProducer(
        bootstrap,
        app.PAYMENTS,
        lambda count, start: payment_records(accts, count, start=start),
        params.rate,
    )
    ctx.own(payments.start, payments.close)
    wait_for(
        lambda: first.metric("worker_processed_records_total") > 0,
        60,
        "the first worker to process payments",
        alive=[first],
    )
    time.sleep(params.warm_seconds)  # steady state before the scale-out (pacing the scenario)
    joined = time.time()
    joined_mono = time.monotonic()
    second = start_worker(ctx, f"{tag}-second", settings)
    wait_for(
        lambda: _balanced(first, second),
        params.timeout,
        f"{label}: two active tasks running on each worker",
        interval=0.2,
        alive=[first, second],
    )
    settled_after = time.monotonic() - joined_mono
    time.sleep(params.settle_seconds)  # the window goes on past the scale-out
    ended = time.time()
    payments.close()
    restored = second.metric("worker_restored_records_total")
    caught_up = second.metric("worker_warmups_caught_up_total")
    stop_worker(second)
    stop_worker(first)

    stamps = read_timestamps(bootstrap, totals_changelog(app_id), start=seeded)
    timeline = {
        f"0_{p}": [t / 1000 - joined for t in ts if joined * 1000 <= t <= ended * 1000]
        for p, ts in stamps.items()
    }
    window = (0.0, ended - joined)
    return ModeOutcome(
        gaps={task: max_gap(ts, *window) for task, ts in timeline.items()},
        timeline=timeline,
        stalls={task: gap_intervals(ts, *window, longer_than=1.0) for task, ts in timeline.items()},
        rebalances={
            "first": _rebalances(first, joined, ended),
            "second": _rebalances(second, joined, ended),
        },
        settled_after=settled_after,
        restored_on_newcomer=restored,
        warmups_caught_up=caught_up,
        newcomer_restore_seconds=max(
            (float(e["seconds"]) for e in second.log_events() if e.get("event") == RESTORE_DONE),
            default=0.0,
        ),
        warmup_seconds=_warmup_seconds(second),
    )


def _balanced(first: WorkerProcess, second: WorkerProcess) -> bool:
    """Each worker runs half the active tasks (processing, not restoring) and no warmup."""
    for worker in (first, second):
        tasks = readyz_tasks(worker)
        running = [t for t in tasks if t["kind"] == "active" and t["state"] == "running"]
        if len(running) != len(TASKS) // 2 or any(t["kind"] == "warmup" for t in tasks):
            return False
    return True


def _warmup_seconds(worker: WorkerProcess) -> float | None:
    """From the worker's first ``membership.assigned`` to its first ``probing.request``."""
    assigned = probe = None
    for event in worker.log_events():
        name = event.get("event")
        if name == MEMBERSHIP_ASSIGNED and assigned is None:
            assigned = log_time(event)
        elif name == "probing.request" and assigned is not None:
            probe = log_time(event)
            break
    return None if assigned is None or probe is None else probe - assigned


def _rebalances(worker: WorkerProcess, start: float, end: float) -> list[float]:
    """Durations from a join's start to the next ``membership.assigned``, for the joins
    that started between ``start`` and ``end`` (epoch seconds)."""
    durations: list[float] = []
    joining: float | None = None
    for event in worker.log_events():
        name = event.get("event")
        if starts_join(event):
            joining = log_time(event)
        elif name == MEMBERSHIP_ASSIGNED and joining is not None:
            if start <= joining <= end:
                durations.append(log_time(event) - joining)
            joining = None
    return durations
