"""Processing throughput: the example app on one worker versus raw consume-and-produce.

Issue 8, item 1. The same ``payments`` records (already in the topic, so neither side
waits for input) are read by

* the ceiling: a raw confluent-kafka loop that produces every record, unchanged, to
  another topic (:func:`benchmarks.baselines.consume_and_produce`);
* one worker running the example app: per payment a totals read-modify-write in the
  store buffer, a profile lookup, an alert for ~1% of them, and a commit every second
  (changelog records collapsed per account, RocksDB batch, offsets).

Both rates are the slope of a records counter between 10% and 90% of the input: the
worker's ``worker_processed_records_total`` scraped from ``/metrics``, the baseline's own
count per batch. Target (issue 8): at least 40% of the ceiling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import plots, profiling
from benchmarks.baselines import consume_and_produce
from benchmarks.harness import (
    RunContext,
    Sampler,
    create_topics,
    metric_or_zero,
    new_application_id,
    produce,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.measure import steady_rate
from benchmarks.results import Result, Row, Target
from benchmarks.workload import (
    EXAMPLE_PARTITIONS,
    accounts,
    create_example_topics,
    payment_records,
    profile_records,
)
from worker.examples import payments as app

NAME = "throughput"
TITLE = "Processing throughput"


@dataclass(frozen=True)
class Params:
    payments: int
    accounts: int
    runs: int = 2  # worker runs; the ceiling runs before each and once more at the end
    commit_interval_ms: int = 1000


FULL = Params(payments=600_000, accounts=10_000, runs=3)
QUICK = Params(payments=30_000, accounts=1_000, runs=1)


def run(ctx: RunContext, params: Params) -> Result:
    """Ceiling and worker runs alternate on one broker, so outside load that comes and
    goes hits both; the best run of each is compared (the least disturbed one)."""
    result = Result(NAME, TITLE)
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    accts = accounts(params.accounts)
    create_example_topics(bootstrap)
    produce(bootstrap, app.PROFILES, profile_records(accts))
    produce(bootstrap, app.PAYMENTS, payment_records(accts, params.payments))
    create_topics(bootstrap, {"ceiling-out": EXAMPLE_PARTITIONS})
    settings: dict[str, object] = {
        "commit.interval.ms": params.commit_interval_ms,
        "num.standby.replicas": 0,
    }

    ceilings: list[list[tuple[float, float]]] = []
    workers: list[tuple[list[tuple[float, float]], float]] = []
    for i in range(params.runs):
        ceilings.append(consume_and_produce(bootstrap, app.PAYMENTS, "ceiling-out"))
        workers.append(_worker_run(ctx, bootstrap, f"worker-{i + 1}", settings, params.payments))
    ceilings.append(consume_and_produce(bootstrap, app.PAYMENTS, "ceiling-out"))
    ceiling_rates = [steady_rate(s, params.payments) for s in ceilings]
    worker_rates = [steady_rate(s, params.payments) for s, _ in workers]
    best_ceiling = max(range(len(ceilings)), key=ceiling_rates.__getitem__)
    best_worker = max(range(len(workers)), key=worker_rates.__getitem__)
    rate, ceiling = worker_rates[best_worker], ceiling_rates[best_ceiling]

    result.rows.append(
        Row(
            metric="processing, records/s",
            measured=rate,
            measured_label="example app, 1 worker",
            baseline=ceiling,
            baseline_label="raw consume-and-produce",
            unit="records/s",
            target=Target(">=", 0.40, "issue 8"),
        )
    )
    result.details += [
        f"Input: {params.payments:,} payments over {params.accounts:,} accounts in "
        f"{EXAMPLE_PARTITIONS} partitions, already in the topic; the profiles table loaded. "
        "Rates are the slope between 10% and 90% of the input.",
        f"Worker (`commit.interval.ms={params.commit_interval_ms}`, otherwise defaults; a new "
        "group each run) runs in records/s: "
        + ", ".join(f"{r:,.0f}" for r in worker_rates)
        + "; from launch to the last record: "
        + ", ".join(f"{seconds:.1f}s" for _, seconds in workers)
        + " (the group join is in that time, not in the rate).",
        "Ceiling runs in records/s, before each worker run and after the last: "
        + ", ".join(f"{r:,.0f}" for r in ceiling_rates)
        + ". The best of each side is compared.",
    ]
    result.plots.append(
        plots.progress(
            ctx.plot_path(NAME),
            "Processing: records done over time (best run of each)",
            {
                f"example app, 1 worker ({rate:,.0f}/s)": workers[best_worker][0],
                f"raw consume-and-produce ({ceiling:,.0f}/s)": ceilings[best_ceiling],
            },
            total=params.payments,
        )
    )
    if ctx.profile:
        table, plot = _profile(ctx, bootstrap, settings, params)
        result.details.append(table)
        result.plots.append(plot)
    return result


def _worker_run(
    ctx: RunContext,
    bootstrap: str,
    name: str,
    overrides: dict[str, object],
    expected: int,
    profile_to: str | None = None,
) -> tuple[list[tuple[float, float]], float]:
    """One worker over the whole topic (a new group): (processed-counter samples, seconds
    from launch to the last record). With ``profile_to``, py-spy samples it from its
    first processed record to its last."""
    settings = worker_settings(bootstrap, new_application_id("bench-throughput"), overrides)
    launched = time.monotonic()
    worker = start_worker(ctx, name, settings)
    processed = lambda: metric_or_zero(worker, "worker_processed_records_total")  # noqa: E731
    timeout = max(120.0, expected / 2000)
    with Sampler(lambda: worker.metric("worker_processed_records_total"), 0.1) as sampler:
        spy = None
        if profile_to:
            wait_for(lambda: processed() > 0, timeout, f"{name} to start", 0.05, [worker])
            spy = profiling.attach(ctx, worker, profile_to)
        wait_for(
            lambda: processed() >= expected,
            timeout,
            f"{name} to process {expected} records",
            interval=0.1,
            alive=[worker],
        )
    seconds = time.monotonic() - launched
    if spy is not None:
        spy.stop()
    stop_worker(worker)
    return _from_first_record(sampler.samples), seconds


def _from_first_record(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Samples from the last zero reading on (the group join before it is not processing)."""
    zeros = [i for i, (_t, count) in enumerate(samples) if count == 0]
    return samples[zeros[-1] :] if zeros else samples


def _profile(
    ctx: RunContext, bootstrap: str, settings: dict[str, object], params: Params
) -> tuple[str, Path]:
    """A second, profiled worker run over the same input (its own group); not measured."""
    sources = profiling.snapshot_sources()
    _worker_run(ctx, bootstrap, "profiled-worker", settings, params.payments, "throughput")
    raw = ctx.path("profiles", "throughput.txt")
    summary = profiling.summarise(raw, "ProcessingLoop.run", sources)
    title = "Profile of the processing run (a second run, py-spy attached)"
    plot = plots.profile(ctx.plot_path(f"{NAME}-profile"), {title: summary})
    return profiling.markdown(summary, title), plot
