"""Restart: launch to first processed record over large local state, versus a cold restore.

Issue 8, item 3. One worker of ``benchmarks.apps:memory_app`` (one store per task, four
tasks, 1 KiB random values under distinct keys) builds its state itself, in steps: at
each step more records are produced and the running worker processes them, so the state
is built once and only grows. At each size three launches are timed, each from the
``Popen`` of ``python -m worker start`` to the first increment of
``worker_processed_records_total`` (polled every 20 ms), each with 200 records waiting:

* *clean stop*: the worker that built the state is stopped with SIGTERM and launched
  again over the same state directory;
* *kill -9*: that restarted worker is fed a stream of records and SIGKILLed by its PID
  while it processes them, so its stores were not closed and its group member never
  left; it is launched again over the same directory;
* *cold restore* (the baseline): the same application over an empty state directory, so
  the changelog, which holds the same state, is restored; a task processes once its own
  part is restored, so the first record comes when the first of the four is done.

The cold worker then grows the state to the next size; the old directory is deleted.
Each launch is broken down into phases from the worker's own log lines and metrics
(docs/benchmarks.template.md, section ``restart``, says which).

Target (issue 8): under 5 s after a clean stop and after kill -9 with 1 GiB of local
state, flat as the state grows.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks.apps import MEMORY_TOPIC
from benchmarks.harness import (
    BenchmarkFailed,
    RunContext,
    metric_or_zero,
    new_application_id,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import create_topics
from benchmarks.log_events import log_time, starts_join
from benchmarks.restart_feed import (
    PARTITIONS,
    PROCESSED,
    VALUE,
    Committed,
    Input,
    kill_while_processing,
)
from benchmarks.results import PlotPath, Result, Row, Target, table
from worker.dev.processes import WorkerProcess
from worker.events import MEMBERSHIP_ASSIGNED, RESTORE_DONE

NAME = "restart"
TITLE = "Restart over local state"
APP = "benchmarks.apps:memory_app"
BACKLOG = 200  # records waiting for every measured launch
TARGET_SECONDS = 5.0
MiB = 1024**2
CASES = ("clean stop", "kill -9", "cold restore")


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...]  # bytes of values in the stores at each step, growing
    kill_backlog: int  # records produced for the worker that is killed while processing


FULL = Params(sizes=(256 * MiB, 512 * MiB, 1024 * MiB), kill_backlog=20_000)
QUICK = Params(sizes=(2 * MiB, 4 * MiB), kill_backlog=2_000)  # two sizes: a range


@dataclass(frozen=True)
class Launch:
    """One timed launch; every duration in seconds."""

    keys: int  # distinct keys in the input at the launch: its state plus what waits
    first_record: float  # launch to the first processed record
    startup: float  # launch to the first log line: interpreter, imports, settings
    before_join: float  # first log line to the first join: state dir, stores opened
    join: float  # the first join to the first membership.assigned
    after_join: float  # worker_first_process_after_join_seconds: restore, first fetch
    all_tasks: float  # launch to all four tasks active and running
    restored: int  # worker_restored_records_total once all tasks ran
    restore_seconds: float  # the longest restore.done
    assignments: int  # membership.assigned lines until all tasks ran


@dataclass(frozen=True)
class Step:
    """The three launches at one state size."""

    disk_bytes: int  # the state directory after the clean stop
    build_seconds: float  # producing and processing this step's growth
    stop_seconds: float  # SIGTERM to exit of the worker that built it
    killed_after: int  # backlog records the killed worker had processed
    launches: dict[str, Launch]


@dataclass(frozen=True)
class Measured:
    """Every step, smallest state first."""

    params: Params
    steps: list[Step]


def measure(ctx: RunContext, params: Params) -> Measured:
    """One application on one broker: grow its state step by step, timing the three
    launches at each size."""
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    create_topics(bootstrap, {MEMORY_TOPIC: PARTITIONS})
    application_id = new_application_id("bench-restart")
    settings = worker_settings(
        bootstrap,
        application_id,
        {
            "commit.interval.ms": 1000,
            "rocksdb.memory.bytes": 64 * MiB,
            "num.standby.replicas": 0,
        },
    )
    feed = Input(bootstrap)
    committed = Committed(bootstrap, application_id)
    try:
        steps = _steps(ctx, params, settings, feed, committed)
    finally:
        committed.close()
    return Measured(params, steps)


def _steps(
    ctx: RunContext,
    params: Params,
    settings: dict[str, object],
    feed: Input,
    committed: Committed,
) -> list[Step]:
    """Grow, then time the three launches, at every size; the cold worker grows the next."""
    grower = start_worker(ctx, "build", settings, APP)
    steps: list[Step] = []
    for i, size in enumerate(params.sizes):
        began = time.monotonic()
        feed.add(max(0, size // VALUE - feed.keys))
        _drain(grower, feed, committed, f"the state grown to {size // MiB} MiB")
        build_seconds = time.monotonic() - began
        state_dir = grower.state_dir
        began = time.monotonic()
        stop_worker(grower, timeout=120)
        stop_seconds = time.monotonic() - began
        disk = _dir_bytes(state_dir)
        launches: dict[str, Launch] = {}

        clean, launches["clean stop"] = _launch(ctx, f"clean-{i}", settings, state_dir, feed)
        killed_after = kill_while_processing(clean, feed, params.kill_backlog)
        killed, launches["kill -9"] = _launch(ctx, f"kill-{i}", settings, state_dir, feed)
        _drain(killed, feed, committed, "the killed worker's backlog processed")
        stop_worker(killed, timeout=120)

        grower, launches["cold restore"] = _launch(ctx, f"cold-{i}", settings, None, feed)
        shutil.rmtree(state_dir, ignore_errors=True)
        steps.append(Step(disk, build_seconds, stop_seconds, killed_after, launches))
        print(f"   {disk / MiB:,.0f} MiB: {_summary(launches)}", flush=True)
    return steps


def _drain(worker: WorkerProcess, feed: Input, committed: Committed, what: str) -> None:
    wait_for(lambda: committed.caught_up(feed.ends), 900, what, interval=0.5, alive=[worker])


def _launch(
    ctx: RunContext,
    name: str,
    settings: dict[str, object],
    state_dir: Path | None,
    feed: Input,
) -> tuple[WorkerProcess, Launch]:
    """Launch a worker with ``BACKLOG`` records waiting and time it (see the module doc).

    Returns once all four tasks are active and running, the worker still running.
    """
    feed.add(BACKLOG)
    wall = time.time()
    launched = time.monotonic()
    worker = start_worker(ctx, name, settings, APP, state_dir=state_dir)
    wait_for(
        lambda: metric_or_zero(worker, PROCESSED) > 0,
        300,
        f"{name}: the first record processed",
        interval=0.02,
        alive=[worker],
    )
    first_record = time.monotonic() - launched
    wait_for(
        lambda: (
            metric_or_zero(worker, "worker_tasks", kind="active") == PARTITIONS and worker.ready()
        ),
        300,
        f"{name}: all tasks running",
        interval=0.05,
        alive=[worker],
    )
    all_tasks = time.monotonic() - launched
    return worker, _breakdown(worker, feed.keys, wall, first_record, all_tasks)


def _breakdown(
    worker: WorkerProcess, keys: int, wall: float, first_record: float, all_tasks: float
) -> Launch:
    events = worker.log_events()
    if not events:
        raise BenchmarkFailed(f"{worker.name}: no log lines")

    def first(name: str, match: Callable[[dict[str, Any]], bool], after: float = 0.0) -> float:
        for event in events:
            if match(event) and log_time(event) >= after:
                return log_time(event)
        raise BenchmarkFailed(f"{worker.name}: no {name} log line\n{worker.log_tail(30)}")

    def assigned_event(event: dict[str, Any]) -> bool:
        return event.get("event") == MEMBERSHIP_ASSIGNED

    first_line = log_time(events[0])
    joining = first("membership.transition to joining", starts_join)
    assigned = first(MEMBERSHIP_ASSIGNED, assigned_event, joining)
    dones: list[dict[str, Any]] = [e for e in events if e.get("event") == RESTORE_DONE]
    return Launch(
        keys=keys,
        first_record=first_record,
        startup=first_line - wall,
        before_join=joining - first_line,
        join=assigned - joining,
        after_join=worker.metric("worker_first_process_after_join_seconds"),
        all_tasks=all_tasks,
        restored=int(worker.metric("worker_restored_records_total")),
        restore_seconds=max((float(e["seconds"]) for e in dones), default=0.0),
        assignments=sum(1 for e in events if e.get("event") == MEMBERSHIP_ASSIGNED),
    )


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _summary(launches: dict[str, Launch]) -> str:
    return ", ".join(
        f"{case} {x.first_record:.2f}s (join {x.join:.2f}s, restored {x.restored:,})"
        for case, x in launches.items()
    )


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """Launch to first record after a clean stop and a kill -9 against a cold restore, at
    the largest size; every launch's phases; the reading; the plot."""
    params, steps = measured.params, measured.steps
    largest = steps[-1]
    size = f"{largest.disk_bytes / MiB:,.0f} MiB of local state"
    cold = largest.launches["cold restore"]
    baseline = f"cold restore of the same state, {cold.restored:,} records"
    rows = [
        Row(
            f"launch to first record after a {case}",
            largest.launches[case].first_record,
            f"{case}, {size}",
            cold.first_record,
            baseline,
            "s",
            Target("<", TARGET_SECONDS, "issue 8", unit="s"),
        )
        for case in CASES[:2]
    ]
    details = [_table(steps), _reading(steps), _growth(steps)]
    facts = {
        "app": APP,
        "value": VALUE,
        "steps": len(steps),
        "backlog": BACKLOG,
        "kill_backlog": params.kill_backlog,
        "target": TARGET_SECONDS,
    }
    plot = plots.restart(
        plot_path(NAME),
        [s.disk_bytes / MiB for s in steps],
        {case: [s.launches[case].first_record for s in steps] for case in CASES},
        {case: [s.launches[case].all_tasks for s in steps] for case in CASES},
        {case: _phases(largest.launches[case]) for case in CASES},
        TARGET_SECONDS,
        f"{largest.disk_bytes / MiB:,.0f} MiB",
    )
    return Result(NAME, TITLE, rows=rows, details=details, plots=[plot], facts=facts)


def _phases(launch: Launch) -> list[tuple[str, float]]:
    """Launch to first record in consecutive phases; the last takes the polling slack."""
    parts = [
        ("start-up and imports", launch.startup),
        ("stores opened", launch.before_join),
        ("group join", launch.join),
    ]
    parts.append(("restore and first fetch", launch.first_record - sum(p for _, p in parts)))
    return parts


def _table(steps: Sequence[Step]) -> str:
    headers = ["local state", "launch", "keys in the input", "launch to first record (s)"]
    headers += ["start-up (s)", "stores opened (s)", "group join (s)"]
    headers += ["assignment to first record (s)", "records restored", "longest restore (s)"]
    headers += ["assignments", "launch to all 4 tasks running (s)"]
    rows = [
        [_mib(step), case, f"{x.keys:,}", f"{x.first_record:.2f}", f"{x.startup:.2f}"]
        + [f"{x.before_join:.2f}", f"{x.join:.2f}", f"{x.after_join:.2f}", f"{x.restored:,}"]
        + [f"{x.restore_seconds:.2f}", x.assignments, f"{x.all_tasks:.2f}"]
        for step in steps
        for case, x in ((case, step.launches[case]) for case in CASES)
    ]
    return table(headers, rows, left=2)


def _reading(steps: Sequence[Step]) -> str:
    """Each restart at the largest size against the target, and its range over the sizes."""
    headers = [f"at {_mib(steps[-1])}", "launch to first record (s)", "target met"]
    headers += ["without the group join (s)", f"from {_mib(steps[0])}: range (s)"]
    rows = []
    for case in CASES[:2]:
        x = steps[-1].launches[case]
        seconds = [s.launches[case].first_record for s in steps]
        met = "yes" if x.first_record < TARGET_SECONDS else "**no**"
        rows.append([f"after a {case}", f"{x.first_record:.2f}", met])
        rows[-1] += [f"{x.first_record - x.join:.2f}", f"{min(seconds):.2f}-{max(seconds):.2f}"]
    return table(headers, rows, left=1)


def _growth(steps: Sequence[Step]) -> str:
    headers = ["grown to", "build (s)", "clean stop (s)", "records of the stream before kill -9"]
    rows = [
        [_mib(s), f"{s.build_seconds:.0f}", f"{s.stop_seconds:.1f}", f"{s.killed_after:,}"]
        for s in steps
    ]
    return table(headers, rows)


def _mib(step: Step) -> str:
    return f"{step.disk_bytes / MiB:,.0f} MiB"
