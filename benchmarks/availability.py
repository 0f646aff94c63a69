"""Availability through membership changes: which tasks stop, for how long, and whether
they had to (issue 13, item 5).

Three scenarios, each on its own broker, with the topology ``worker.examples.counting``
(one output per input; ``--app worker.examples.counting:build``), ``inputs`` and ``outputs``
in 6 partitions, so 6 tasks ``0_0``..``0_5``. Input flows at ``rate`` records/s over
``keys`` keys (every partition) from before the first membership event to the end.
Workers: ``num.standby.replicas=1``, ``commit.interval.ms`` 100, the harness's group
timing, otherwise defaults (``max.warmup.replicas`` 2, ``acceptable.recovery.lag``
10,000).

- **Rolling restart**: three workers; one after the other is SIGTERMed, stays down for
  ``down_seconds`` once it exited, is started again over the same state dir, and runs
  ``event_seconds`` before the next one. The pause between the stop and the start keeps
  the leave's rebalance and the rejoin's in separate windows; restarted at once, both
  would fall into one window and neither could be told apart.
- **Scale-out**: one worker, ready before the input starts; a second and a third start
  ``scale_seconds`` apart, or later when the tasks have not spread over the workers by
  then (a loaded machine): each event's window holds its whole move.
- **Kill -9**: three workers; one is SIGKILLed, stays dead for ``kill_seconds`` (its
  group session has to expire first), then is started again over its state dir (the
  restart after a crash is the scenario's second event); ``event_seconds`` follow.

**Membership events and their windows.** Each SIGTERM, start and kill is an event, timed
by the benchmark when it sends the signal or launches the process; its window runs to the
next event (the last one's to the end of the input).

**Stalls** come from the output: librdkafka stamps each output record (CreateTime) when
the worker produces it, and task ``0_p`` writes only to partition ``p`` of ``outputs``, so
a silent stretch in a partition's timestamps is a stretch in which that task produced
nothing, whoever owned it (:mod:`worker.dev.stalls`). A task's stall in an event is its
longest silent stretch in the window, the window's edges included.

**Owners come from the workers' JSON logs** (:mod:`benchmarks.availability_owners` says
which events and fields it reads).

A task **changed owner** in an event when some worker other than its owner at the start of
the window became its owner in the window, or its owner's process exited. For a moved
task the report names where it went, what the new owner held of it before (``standby``,
``warmup``, ``local state`` for an initial standby, or nothing), the records it restored
there, and its **handover**: from its old owner giving it up (an applied assignment
without it, or the signal that stopped the old owner) to the new owner's applied
assignment with it. The eager protocol hands a task over within one round, so its
handover is about 0; the cooperative one revokes in one round and assigns in the
follow-up round, so its handover is that follow-up round; after a kill -9 it also holds
the wait for the dead member's session to expire.

**Targets** (issue 13): a task that did not change owner never stalls longer than 1.5 s;
per event the share of tasks that stalled longer than 1.5 s is at most the share that
changed owner; a moved task that had a standby, warmup or local copy stalls at most its
handover plus 0.5 s (one follow-up round plus 0.5 s). The eager protocol misses them all
(every rebalance stops every task); the figures the issue measured on it are the
baselines.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks import plots
from benchmarks.availability_owners import PARTITIONS, Move
from benchmarks.availability_scenarios import (
    APP,
    FULL,
    QUICK,
    STALLED,
    EventOutcome,
    Measured,
    Params,
    ScenarioOutcome,
    measure,
    worker_names,
)
from benchmarks.results import PlotPath, Result, Row, Target, table
from worker.dev.stalls import gap_intervals
from worker.examples import counting

# What benchmarks/__main__.py runs: the parameters, measure() and report().
__all__ = ["FULL", "NAME", "QUICK", "TITLE", "measure", "report"]
NAME = "availability"
TITLE = "Availability through membership changes"
DRAWN = 0.5  # s: the plots draw silent stretches longer than this
ROUND_SLACK = 0.5  # s: a moved task with a copy may stall its handover plus this
SOURCE = "issue 13"


# The scenarios' names in the summary's rows (the same in quick mode).
SHORT = {"rolling": "rolling restart", "scale_out": "scale-out", "kill": "kill -9"}
# What the issue measured on the eager protocol (the same workloads): the baselines.
EAGER = {
    "rolling": (
        5.9,
        "for 93% of the restart events every partition stopped for more than 1.5 s; "
        "the longest gap 5.9 s",
    ),
    "scale_out": (4.1, "every partition stopped 3.2-4.1 s"),
    "kill": (9.6, "gaps of 5-9.6 s on every partition"),
}


def _title(key: str, params: Params) -> str:
    return {
        "rolling": f"Rolling restart of {params.workers} workers",
        "scale_out": "Scale-out " + " -> ".join(str(n) for n in range(1, params.workers + 1)),
        "kill": f"Kill -9 of one of {params.workers}",
    }[key]


def _setup(key: str, params: Params) -> str:
    """What the scenario did, in a sentence (the scenario functions above do it)."""
    if key == "rolling":
        return (
            f"{params.workers} workers, balanced before the input starts; {params.restarts} of "
            f"them in turn: SIGTERM, {params.down_seconds:g} s down once it exited, started "
            f"again over its state dir, {params.event_seconds:g} s before the next."
        )
    if key == "scale_out":
        return (
            f"1 worker, ready before the input starts; then {params.workers - 1} more, "
            f"{params.scale_seconds:g} s apart, each once the tasks have spread (the last "
            "one's window as long)."
        )
    then = "left dead to the end"
    if params.restart_killed:
        then = f"then started again over its state dir, {params.event_seconds:g} s to the end"
    return (
        f"{params.workers} workers, balanced before the input starts; kill -9 of "
        f"{worker_names(params.workers)[-1]}, dead for {params.kill_seconds:g} s, {then}."
    )


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """Per scenario its two rows, details and timeline; the copy row; the shares plot."""
    params, outcomes = measured.params, measured.outcomes
    result = Result(NAME, TITLE)
    for outcome in outcomes:
        result.rows += _rows(outcome)
    result.rows.append(_copy_row(outcomes))
    result.facts = {
        "rate": params.rate,
        "keys": params.keys,
        "inputs": counting.INPUTS,
        "partitions": PARTITIONS,
        "app": APP,
        "commit_interval_ms": params.commit_interval_ms,
        "stalled": STALLED,
    }
    for outcome in outcomes:
        result.details += _scenario_details(outcome, params)
        result.plots.append(
            plots.availability_timeline(
                plot_path(f"{NAME}-{outcome.key}"), **_plot_args(outcome, params)
            )
        )
    result.plots.insert(
        0,
        plots.availability_shares(
            plot_path(NAME),
            {
                _title(o.key, params): [
                    (e.event.label, e.stalled_share, e.moved_share) for e in o.events
                ]
                for o in outcomes
            },
            STALLED,
        ),
    )
    return result


def _rows(outcome: ScenarioOutcome) -> list[Row]:
    eager, _ = EAGER[outcome.key]
    kept = [s for e in outcome.events for s in e.kept_stalls.values()]
    return [
        Row(
            metric=f"{SHORT[outcome.key]}: longest stall of a task that kept its owner",
            measured=max(kept, default=float("nan")),
            measured_label=(
                f"{sum(len(e.kept_stalls) for e in outcome.events)} kept tasks "
                f"in {len(outcome.events)} events"
            ),
            baseline=eager,
            baseline_label=f"eager, {SOURCE}: longest gap, every task",
            unit="s",
            target=Target("<=", STALLED, SOURCE, unit="s"),
        ),
        Row(
            metric=f"{SHORT[outcome.key]}: share of tasks stalled > {STALLED:g} s per event (mean)",
            measured=100 * statistics.mean(e.stalled_share for e in outcome.events),
            measured_label=f"{len(outcome.events)} events",
            baseline=100 * statistics.mean(e.moved_share for e in outcome.events),
            baseline_label="share that changed owner",
            unit="%",
            target=Target("<=", 1.0, f"{SOURCE}: at most the share that moved"),
        ),
    ]


def _allowed(move: Move) -> float | None:
    """What a moved task with a copy may stall: its handover + 0.5 s."""
    if move.had is None or move.handover_seconds is None:
        return None
    return move.handover_seconds + ROUND_SLACK


def _copy_row(outcomes: Sequence[ScenarioOutcome]) -> Row:
    """The moved task with a copy that stalled longest against what it may stall."""
    worst: tuple[float, float, str] | None = None
    for outcome in outcomes:
        for event in outcome.events:
            for task, move in event.moves.items():
                allowed = _allowed(move)
                if allowed is None:
                    continue
                stall = event.stalls[task]
                if worst is None or stall / allowed > worst[0] / worst[1]:
                    where = f"{SHORT[outcome.key]}, {event.event.label}, {task}"
                    worst = (stall, allowed, where)
    stall, allowed, where = worst or (float("nan"), float("nan"), "no such task")
    return Row(
        metric="a moved task with a standby, warmup or local copy: stall against its handover",
        measured=stall,
        measured_label=f"worst: {where}",
        baseline=allowed,
        baseline_label=f"its handover + {ROUND_SLACK:g} s",
        unit="s",
        target=Target("<=", 1.0, SOURCE),
    )


def _scenario_details(outcome: ScenarioOutcome, params: Params) -> list[str]:
    _, eager = EAGER[outcome.key]
    met = sum(1 for e in outcome.events if e.stalled_share <= e.moved_share)
    kept = max((s for e in outcome.events for s in e.kept_stalls.values()), default=0.0)
    lines = [
        "| event | at (s) | window (s) | stalled > 1.5 s | changed owner | "
        "longest stall per task (s; * moved) | moved: from -> to (what the new owner held; "
        "records it restored; handover; the stall allowed) |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for e in outcome.events:
        stalls = ", ".join(
            f"{t}{'*' if t in e.moves else ''} {s:.1f}" for t, s in sorted(e.stalls.items())
        )
        moves = "; ".join(_move_cell(e, t, m) for t, m in sorted(e.moves.items()))
        lines.append(
            f"| {e.event.label} | {e.start - outcome.t0:.1f} | {e.end - e.start:.1f} "
            f"| {e.stalled_share:.0%} | {e.moved_share:.0%} | {stalls} | {moves or 'none'} |"
        )
    rounds = [b - a for spans in outcome.rounds.values() for a, b in spans if a >= outcome.t0]
    span = f"{min(rounds):.1f}-{max(rounds):.1f} ({len(rounds)})" if rounds else "- (none logged)"
    headers = ["events where the stalled tasks were at most those that moved"]
    headers += ["longest stall of a task that kept its owner (s)"]
    headers += ["rebalance rounds after the input started (s; how many, all workers)"]
    summary = [[f"{met} of {len(outcome.events)}", f"{kept:.1f}", span]]
    return [
        f"### {_title(outcome.key, params)}",
        f"{_setup(outcome.key, params)} Eager baseline ({SOURCE}): {eager}.",
        table(headers, summary, left=0),
        "\n".join(lines),
    ]


def _move_cell(event: EventOutcome, task: str, move: Move) -> str:
    allowed = _allowed(move)
    facts = [
        move.had or "no copy",
        "-" if move.restored is None else f"{move.restored:,}",
        "-" if move.handover_seconds is None else f"{move.handover_seconds:.1f} s",
        "-" if allowed is None else f"{allowed:.1f} s",
    ]
    return f"{task} {move.before or '-'} -> {move.after or 'nobody'} ({'; '.join(facts)})"


def _plot_args(outcome: ScenarioOutcome, params: Params) -> dict[str, Any]:
    t0 = outcome.t0
    span = (0.0, outcome.end - t0)
    # From the first output on: the input's first records take a moment to come out.
    first = min((t for ts in outcome.outputs.values() for t in ts if t >= t0), default=t0)
    gaps = {
        task: gap_intervals([t - t0 for t in ts], first - t0, span[1], longer_than=DRAWN)
        for task, ts in outcome.outputs.items()
    }
    owners = {task: [(at - t0, who) for at, who in spans] for task, spans in outcome.owners.items()}
    return {
        "title": _title(outcome.key, params),
        "gaps": gaps,
        "owners": owners,
        "events": [(e.event.at - t0, e.event.label) for e in outcome.events],
        "span": span,
        "stalled": STALLED,
    }
