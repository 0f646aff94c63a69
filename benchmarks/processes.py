"""Every core: the example app on 1 worker process against 2 in one group (issue 14, item 3).

One Python worker process runs its processing loop on one core. This measures what a
second process on the same machine adds, over the same input in the same run:

1. ``payments`` (the example app's input, ``accounts`` keys) is produced once, before any
   worker starts, in ``partitions`` partitions: 2 processes own 2 tasks each.
2. Runs alternate, 1 process then 2 and 2 then 1, each in a new group (a new
   ``application.id``) over the whole topic; a raw consume-and-produce of the same topic
   (:func:`benchmarks.baselines.consume_and_produce`) runs before each pair and after the
   last, as context: what the broker and librdkafka allow with no processing at all.
3. A run's rate is the slope of the workers' summed ``worker_processed_records_total``
   from 10% to 90% of the input, but never from before every process of the run has
   processed a record: the join of the second process (a rebalance that moves two tasks
   to it) is not in the rate. What was processed before that point is reported.
4. Meanwhile the CPU time of the workers, the broker, this harness and the whole machine
   is sampled from ``/proc``: a missed target is explained by where the cores went.

Target (issue 14): 2 processes on a 2-core machine at least 1.5x the records/s of one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from benchmarks import cpu, plots
from benchmarks.baselines import consume_and_produce
from benchmarks.harness import (
    BenchmarkFailed,
    RunContext,
    client_settings,
    new_application_id,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import create_topics, produce
from benchmarks.measure import (
    crossing_time,
    from_first_record,
    steady_rate_or_span,
    value_at,
)
from benchmarks.results import PlotPath, Result, Row, Target, table
from benchmarks.sampling import Sampler
from benchmarks.workload import accounts, payment_records, profile_records
from worker.dev import sample_data
from worker.dev.processes import WorkerProcess
from worker.examples import payments as app

NAME = "processes"
TITLE = "Every core: 1 worker process against 2"
TARGET = Target(">=", 1.5, "issue 14")

Samples = list[tuple[float, float]]
# What the CPU samplers watch; "machine" is every core together, whatever runs on it.
WORKERS, BROKER, HARNESS, MACHINE = "workers", "broker", "harness", "machine"


@dataclass(frozen=True)
class Params:
    payments: int
    accounts: int
    partitions: int = 4
    pairs: int = 2  # (1 process, 2 processes) pairs, alternating their order
    commit_interval_ms: int = 1000


FULL = Params(payments=2_000_000, accounts=10_000, pairs=2)
QUICK = Params(payments=200_000, accounts=1_000, pairs=1)


@dataclass(frozen=True)
class Run:
    """One run of ``processes`` workers over the whole input."""

    processes: int
    processed: Samples  # (monotonic time, records processed by all its workers)
    balanced_at: float  # when every one of its workers had processed a record
    cpu: dict[str, Samples]  # WORKERS, BROKER, HARNESS, MACHINE -> (time, CPU seconds)
    seconds: float  # launch to the last record

    def window(self, total: int) -> tuple[float, float]:
        """(start, end) of the measured stretch: from 10% of ``total`` or the balance,
        whichever is later, to 90%. A run that balanced only after 90% (quick mode's
        tiny input) is measured from 10% to 90%, its join included (:meth:`balanced_late`)."""
        low = crossing_time(self.processed, 0.1 * total)
        high = crossing_time(self.processed, 0.9 * total)
        if self.balanced_at < high:
            return max(low, self.balanced_at), high
        if high > low:
            return low, high
        return self.processed[0][0], self.processed[-1][0]

    def balanced_late(self, total: int) -> bool:
        """Whether the run balanced only after 90% of ``total``: then its rate has the
        join in it."""
        return self.balanced_at >= crossing_time(self.processed, 0.9 * total)

    def rate(self, total: int) -> float:
        """Records/s in :meth:`window`."""
        start, end = self.window(total)
        if end <= start:
            return float("nan")
        return (value_at(self.processed, end) - value_at(self.processed, start)) / (end - start)

    def before_window(self, total: int) -> float:
        """Share of the input processed before the measured stretch began."""
        return value_at(self.processed, self.window(total)[0]) / total

    def cores(self, total: int) -> dict[str, float]:
        """Cores in use during the measured stretch by each CPU sampler's subject, plus
        "other": the machine's busy cores that none of them used (other programs)."""
        start, end = self.window(total)
        span = max(end - start, 1e-9)
        used = {k: (value_at(s, end) - value_at(s, start)) / span for k, s in self.cpu.items()}
        machine = used.pop(MACHINE, float("nan"))
        used["other"] = max(0.0, machine - sum(used.values()))
        return used


@dataclass(frozen=True)
class Measured:
    params: Params
    runs: list[Run]  # in the order they ran
    ceilings: list[Samples]  # raw consume-and-produce: before each pair and after the last
    cpu_count: int

    def rates(self, processes: int) -> list[float]:
        return [r.rate(self.params.payments) for r in self.runs if r.processes == processes]

    def pair_ratios(self) -> list[float]:
        """2-process rate / 1-process rate of each pair of runs that ran back to back."""
        total, ratios = self.params.payments, []
        for first, second in zip(self.runs[::2], self.runs[1::2], strict=False):
            one, two = sorted((first, second), key=lambda r: r.processes)
            ratios.append(two.rate(total) / one.rate(total))
        return ratios

    def best(self, processes: int) -> Run:
        runs = [r for r in self.runs if r.processes == processes]
        return max(runs, key=lambda r: r.rate(self.params.payments))


def measure(ctx: RunContext, params: Params) -> Measured:
    """Produce the input once, then alternate 1- and 2-process runs with ceilings between."""
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    accts = accounts(params.accounts)
    sample_data.create_example_topics(client_settings(bootstrap), params.partitions)
    produce(bootstrap, app.PROFILES, profile_records(accts))
    produce(bootstrap, app.PAYMENTS, payment_records(accts, params.payments))
    create_topics(bootstrap, {"ceiling-out": params.partitions})
    settings: dict[str, object] = {
        "commit.interval.ms": params.commit_interval_ms,
        "num.standby.replicas": 0,
        # Should one process join after the other has begun, its tasks move at once
        # instead of after a warmup and a probing rebalance: the rate starts only once
        # both process anyway, and that point comes sooner.
        "max.warmup.replicas": 0,
    }
    assert broker.pid is not None
    runs: list[Run] = []
    ceilings: list[Samples] = []
    for pair in range(params.pairs):
        ceilings.append(consume_and_produce(bootstrap, app.PAYMENTS, "ceiling-out"))
        for processes in (1, 2) if pair % 2 == 0 else (2, 1):
            label = f"run{len(runs) + 1}-{processes}p"
            runs.append(_run(ctx, bootstrap, broker.pid, label, processes, settings, params))
    ceilings.append(consume_and_produce(bootstrap, app.PAYMENTS, "ceiling-out"))
    return Measured(params, runs, ceilings, os.cpu_count() or 1)


def _run(
    ctx: RunContext,
    bootstrap: str,
    broker_pid: int,
    label: str,
    processes: int,
    overrides: dict[str, object],
    params: Params,
) -> Run:
    """``processes`` workers of one new group, started together, over the whole topic."""
    settings = worker_settings(bootstrap, new_application_id("bench-processes"), overrides)
    launched = time.monotonic()
    workers = [start_worker(ctx, f"{label}-w{i + 1}", settings) for i in range(processes)]
    pids = [w.pid for w in workers if w.pid is not None]
    balanced: list[float] = []

    def processed() -> float:
        # A worker that does not answer raises OSError: the sample is skipped rather
        # than summed with a zero, which would make the counter go back.
        counts = [w.metric("worker_processed_records_total") for w in workers]
        if not balanced and all(counts):
            balanced.append(time.monotonic())
        return sum(counts)

    samplers = {
        WORKERS: Sampler(lambda: cpu.processes_seconds(pids), 0.1),
        BROKER: Sampler(lambda: cpu.process_seconds(broker_pid), 0.1),
        HARNESS: Sampler(lambda: cpu.process_seconds(os.getpid()), 0.1),
        MACHINE: Sampler(cpu.machine_busy_seconds, 0.1),
    }
    for sampler in samplers.values():
        sampler.__enter__()
    try:
        with Sampler(processed, 0.1) as counter:
            _wait_done(counter, workers, params.payments, label)
    finally:
        for sampler in samplers.values():
            sampler.__exit__()
    seconds = time.monotonic() - launched
    for worker in workers:
        stop_worker(worker)
    if not balanced:
        raise BenchmarkFailed(
            f"{label}: the input was processed before every process had a task "
            "(the group did not spread the tasks in time)"
        )
    return Run(
        processes,
        counter.samples,
        balanced[0],
        {k: s.samples for k, s in samplers.items()},
        seconds,
    )


def _wait_done(counter: Sampler, workers: list[WorkerProcess], expected: int, label: str) -> None:
    def done() -> bool:
        return bool(counter.samples) and counter.samples[-1][1] >= expected

    timeout = max(120.0, expected / 2000)
    wait_for(done, timeout, f"{label} to process {expected} records", 0.1, workers)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """The ratio row (best 2-process run against the best 1-process run), the ceiling as
    context, every run with where the cores went, the plots, and why a missed target
    was missed."""
    params, total = measured.params, measured.params.payments
    result = Result(NAME, TITLE)
    one, two = measured.best(1), measured.best(2)
    one_rate, two_rate = one.rate(total), two.rate(total)
    ceiling_rates = [steady_rate_or_span(s, total) for s in measured.ceilings]
    ceiling = max(ceiling_rates)
    result.rows += [
        Row(
            metric="records/s, 2 processes against 1",
            measured=two_rate,
            measured_label="example app, 2 worker processes",
            baseline=one_rate,
            baseline_label="example app, 1 worker process",
            unit="records/s",
            target=TARGET,
        ),
        Row(
            metric="records/s, 2 processes against raw consume-and-produce",
            measured=two_rate,
            measured_label="example app, 2 worker processes",
            baseline=ceiling,
            baseline_label="raw consume-and-produce, 1 process",
            unit="records/s",
        ),
    ]
    result.facts = {
        "payments": total,
        "accounts": params.accounts,
        "partitions": params.partitions,
        "cores": measured.cpu_count,
        "commit_interval_ms": params.commit_interval_ms,
    }
    result.details += [_cores_table(measured), _baselines_table(measured, ceiling_rates)]
    note = _unequal_machine(one, two, total)
    if note:
        result.details.append(note)
    ratio = two_rate / one_rate if one_rate else float("nan")
    if not TARGET.met(ratio):
        result.details.append(_why_missed(measured, one, two, ratio))
    result.plots += [
        plots.progress(
            plot_path(NAME),
            "Records processed over time (best run of each; from the first record)",
            {
                f"1 process ({one_rate:,.0f}/s)": from_first_record(one.processed),
                f"2 processes ({two_rate:,.0f}/s)": from_first_record(two.processed),
                f"raw consume-and-produce ({ceiling:,.0f}/s)": measured.ceilings[
                    ceiling_rates.index(ceiling)
                ],
            },
            total=total,
        ),
        plots.cores(
            plot_path(f"{NAME}-cores"),
            "Cores in use during the measured stretch, per run",
            {_run_label(i, r): r.cores(total) for i, r in enumerate(measured.runs)},
            measured.cpu_count,
        ),
    ]
    return result


def _run_label(index: int, run: Run) -> str:
    return f"#{index + 1}: {run.processes} process{'es' if run.processes > 1 else ''}"


def _cores_table(measured: Measured) -> str:
    """Per run: its rate, where the cores went in the measured stretch, records per worker
    core, and how much of the input was done before the stretch."""
    total = measured.params.payments
    headers = ["run", "records/s", "workers", "broker", "harness", "other", "idle"]
    headers += ["records per worker CPU second", "input done before the measured stretch"]
    headers += ["launch to last record (s)"]
    rows = []
    for i, run in enumerate(measured.runs):
        cores, rate = run.cores(total), run.rate(total)
        per_core = rate / cores[WORKERS] if cores[WORKERS] > 0 else float("nan")
        late = " (a task for every process only after 90%: the join is in the rate)"
        rows.append(
            [_run_label(i, run), f"{rate:,.0f}"]
            + [f"{cores[k]:.2f}" for k in (WORKERS, BROKER, HARNESS, "other")]
            + [f"{_idle(measured, cores):.2f}", f"{per_core:,.0f}"]
            + [f"{run.before_window(total):.0%}" + (late if run.balanced_late(total) else "")]
            + [f"{run.seconds:.1f}"]
        )
    return table(headers, rows)


def _baselines_table(measured: Measured, ceiling_rates: list[float]) -> str:
    """The ratio of each pair of runs that ran back to back, and the raw ceiling around them."""
    ratios = [f"{r:.2f}" for r in measured.pair_ratios()]
    rows = [
        [f"pair {i + 1}", ratios[i], f"{rate:,.0f}"]
        if i < len(ratios)
        else ["after the last pair", "", f"{rate:,.0f}"]
        for i, rate in enumerate(ceiling_rates)
    ]
    headers = [
        "raw rate measured before",
        "2 processes / 1 in the pair",
        "raw consume-and-produce, records/s",
    ]
    return table(headers, rows)


def _unequal_machine(one: Run, two: Run, total: int) -> str | None:
    """A warning when other programs took a different share of the machine in the two best runs."""
    c1, c2 = one.cores(total), two.cores(total)
    if abs(c1["other"] - c2["other"]) < 0.2:
        return None
    return (
        f"Other programs used {c1['other']:.2f} cores during the best 1-process run "
        f"and {c2['other']:.2f} during the best 2-process run: the ratio compares runs "
        "that did not get the same share of the machine, so it "
        + ("overstates" if c1["other"] > c2["other"] else "understates")
        + " what a second process adds on a machine of its own."
    )


def _idle(measured: Measured, cores: dict[str, float]) -> float:
    return max(0.0, measured.cpu_count - sum(cores.values()))


def _why_missed(measured: Measured, one: Run, two: Run, ratio: float) -> str:
    """The missed ratio in cores: how many the 2-process run's workers would have needed
    at their work per core, how many they got, and where the rest of the machine went."""
    total = measured.params.payments
    c1, c2 = one.cores(total), two.cores(total)
    per_core_1 = one.rate(total) / c1[WORKERS]
    per_core_2 = two.rate(total) / c2[WORKERS]
    needed = TARGET.value * one.rate(total) / per_core_2
    elsewhere = {
        "other programs": c2["other"],
        "the broker": c2[BROKER],
        "this harness": c2[HARNESS],
        "nothing (idle)": _idle(measured, c2),
    }
    rows = [
        [
            f"{TARGET.value:g}x the best 1-process run, records/s",
            f"{TARGET.value * one.rate(total):,.0f}",
        ],
        ["records per worker CPU second, 2 processes", f"{per_core_2:,.0f}"],
        ["records per worker CPU second, 1 process", f"{per_core_1:,.0f}"],
        ["worker cores that rate needed at 2 processes' work per core", f"{needed:.2f}"],
        [
            "worker cores the 2 processes got (1 process got)",
            f"{c2[WORKERS]:.2f} ({c1[WORKERS]:.2f})",
        ],
        *([f"cores to {who}", f"{cores:.2f}"] for who, cores in elsewhere.items()),
    ]
    text = "**Why the target is missed.**\n\n" + table(["", "the best runs"], rows) + "\n\n"
    if c2[WORKERS] >= needed:
        return text + "The cores were there: the work per core is what fell short."
    biggest = max(elsewhere, key=lambda who: elsewhere[who])
    if biggest == "nothing (idle)":
        return text + (
            "Most of the shortfall stayed idle: the workers were waiting (on the broker, "
            "on commits), not short of cores."
        )
    return text + f"Most of the {needed - c2[WORKERS]:.2f} cores missing went to {biggest}."
