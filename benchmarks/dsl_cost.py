"""What the DSL costs (issue 30, item 6), against the same work without it, same run.

* CPU per record of a count per key written with the DSL
  (``stream.group_by_key().count().to_stream().to()``) against the same count written by
  hand with the Processor API (one processor: read the count, write it plus one,
  forward): in one process of its own, through the real task layer
  (:func:`benchmarks.task_layer.running_tasks`: router, tasks, graph, typed store views,
  RocksDB, the record collector's producers), over records fetched beforehand, the least
  CPU time (``time.thread_time``) of ``reps`` alternating runs, a commit every
  ``commit_every`` records. Target: at most 1.10x.
* Records/s of one repartition hop: one worker counting per key after a ``select_key``
  that marks the stream re-keyed (so the records go through
  ``<application.id>-KSTREAM-...-repartition`` and a second sub-topology) against the same
  count without the hop, over the same input, the slope of
  ``worker_processed_records_total`` from 10% to 90% of what it processes (twice the input
  with the hop: each record is processed on both sides of the topic), in input records/s;
  ``process_runs`` runs of each in turns, the best of each compared (the machine is shared
  with the broker and this harness, and one run's rate moved by 2x between runs here).
  Target: at least 0.5x. Beside it, the CPU each worker used per input record over the
  same span (the whole process, and its processing thread alone), from ``/proc``: on a
  loaded machine a worker gets a varying share of a core, so the rates move with the
  load and the CPU ratio says what the hop costs. 0.5x records/s is at most 2x CPU.
* ``--broker kafka`` runs it on Apache Kafka instead of the embedded broker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from benchmarks.apps import store_and_forward
from benchmarks.count_sum import amount_records
from benchmarks.cpu import main_thread_seconds, process_seconds
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
from benchmarks.kafka_io import create_topics, produce
from benchmarks.measure import from_first_record, steady_rate_or_span
from benchmarks.results import PlotPath, Result, Row, Target, table
from benchmarks.sampling import Sampler
from benchmarks.spawned import measure_in_child
from benchmarks.task_layer import fetch, running_tasks
from worker.dsl import StreamsBuilder
from worker.processing import ProcessorContext, Topology
from worker.processing.topology import BuiltTopology

NAME = "dsl_cost"
TITLE = "The DSL's cost: a count per key against the Processor API, and a repartition hop"
INPUT = "dsl-amounts"
OUTPUT = "dsl-counts"
STORE = "counts"
PARTITIONS = 4
BATCH = 500
CPU_TARGET = Target("<=", 1.10, "issue 30")
HOP_TARGET = Target(">=", 0.5, "issue 30")
HOP_CPU_TARGET = Target("<=", 2.0, "issue 30: 0.5x records/s, CPU-bound")


@dataclass(frozen=True)
class Params:
    records: int
    keys: int
    reps: int = 5
    commit_every: int = 100_000
    process_runs: int = 2  # worker runs of each way (the best of each is compared)


FULL = Params(records=300_000, keys=10_000)
QUICK = Params(records=20_000, keys=1_000, reps=2, commit_every=10_000, process_runs=1)


@dataclass(frozen=True)
class Measured:
    params: Params
    dsl_us: list[float]  # CPU us per record, each run
    papi_us: list[float]
    hop_rates: list[float]  # input records/s, each worker run
    plain_rates: list[float]
    broker: str
    hop_cpu: list[tuple[float, float]]  # (process, processing thread) CPU us per input record
    plain_cpu: list[tuple[float, float]]


# -- the topologies ---------------------------------------------------------------------


def count_by_hand(ctx: ProcessorContext, key: str, value: Any) -> None:
    counts = ctx.store(STORE)
    n = (counts.get(key) or 0) + 1
    counts.put(key, n)
    ctx.forward(key, n)


def papi_count() -> Topology:
    """The count written with the Processor API."""
    return store_and_forward(INPUT, STORE, "count", count_by_hand, OUTPUT)


def count_app() -> StreamsBuilder:
    """The count written with the DSL (``--app benchmarks.dsl_cost:count_app``)."""
    builder = StreamsBuilder()
    builder.stream(INPUT).group_by_key().count(name=STORE).to_stream().to(OUTPUT)
    return builder


def rekeyed_count_app() -> StreamsBuilder:
    """The same count after a re-key that keeps the key: one repartition hop."""
    builder = StreamsBuilder()
    stream = builder.stream(INPUT).select_key(lambda key, value: key)
    stream.group_by_key().count(name=STORE).to_stream().to(OUTPUT)
    return builder


# -- measuring --------------------------------------------------------------------------


def measure(ctx: RunContext, params: Params) -> Measured:
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    create_topics(bootstrap, {INPUT: PARTITIONS, OUTPUT: PARTITIONS})
    produce(bootstrap, INPUT, amount_records(params.records, params.keys))
    dsl_us, papi_us = measure_in_child(ctx, _cpu_runs, bootstrap, ctx.path("runs"), params)
    runs: dict[str, list[WorkerRun]] = {"plain": [], "hop": []}
    ways = (
        ("plain", "benchmarks.dsl_cost:count_app", 1),
        ("hop", "benchmarks.dsl_cost:rekeyed_count_app", 2),
    )
    for run in range(params.process_runs):  # in turns, each first every other time
        for label, app, sides in ways if run % 2 == 0 else ways[::-1]:
            name = f"worker-{label}-{run}"
            runs[label].append(_worker_run(ctx, bootstrap, name, app, params.records, sides))
    hop, plain = runs["hop"], runs["plain"]
    return Measured(
        params,
        dsl_us,
        papi_us,
        [r.rate for r in hop],
        [r.rate for r in plain],
        ctx.broker,
        [r.cpu_us for r in hop],
        [r.cpu_us for r in plain],
    )


@dataclass(frozen=True)
class WorkerRun:
    rate: float  # input records/s
    cpu_us: tuple[float, float]  # CPU us per input record: process, processing thread


def _worker_run(
    ctx: RunContext, bootstrap: str, name: str, app: str, records: int, sides: int
) -> WorkerRun:
    """One worker of ``app`` over the whole input (``sides`` processings per record), a new
    group; CPU read at its first processed record and its last, so start-up is left out."""
    overrides: dict[str, object] = {"commit.interval.ms": 1000, "num.standby.replicas": 0}
    settings = worker_settings(bootstrap, new_application_id("bench-dsl"), overrides)
    worker = start_worker(ctx, name, settings, app)
    processed = lambda: metric_or_zero(worker, "worker_processed_records_total")  # noqa: E731
    expected = sides * records
    timeout = max(120.0, expected / 2000)
    pid = cast(int, worker.pid)
    with Sampler(lambda: worker.metric("worker_processed_records_total"), 0.1) as sampler:
        wait_for(lambda: processed() > 0, timeout, f"{name} to start", 0.02, [worker])
        cpu, thread = process_seconds(pid), main_thread_seconds(pid)
        wait_for(lambda: processed() >= expected, timeout, f"{name} to finish", 0.05, [worker])
        cpu, thread = process_seconds(pid) - cpu, main_thread_seconds(pid) - thread
    stop_worker(worker)
    samples = from_first_record(sampler.samples)
    rate = steady_rate_or_span(samples, expected) / sides
    return WorkerRun(rate, (1e6 * cpu / records, 1e6 * thread / records))


def _cpu_runs(bootstrap: str, workdir: Path, params: Params) -> tuple[list[float], list[float]]:
    """In a spawned process (:mod:`benchmarks.spawned`): the CPU runs, DSL and Processor
    API in turns."""
    records = fetch(bootstrap, INPUT)
    if len(records) != params.records:
        raise BenchmarkFailed(f"fetched {len(records):,} records, not {params.records:,}")
    runs: dict[str, list[float]] = {"dsl": [], "papi": []}
    builds = {
        "dsl": lambda app_id: count_app().build(app_id).build(),
        "papi": lambda app_id: papi_count().build(),
    }
    # One warm-up run of each (imports, caches), then the two in turns, each first
    # every other time.
    for rep in range(-1, params.reps):
        for way in ("dsl", "papi") if rep % 2 else ("papi", "dsl"):
            app_id = new_application_id(f"bench-{way}")
            cpu = _run(workdir, bootstrap, builds[way](app_id), records, params, app_id)
            if rep >= 0:
                runs[way].append(cpu)
    return runs["dsl"], runs["papi"]


def _run(
    workdir: Path,
    bootstrap: str,
    topology: BuiltTopology,
    records: list[Any],
    params: Params,
    application_id: str,
) -> float:
    """CPU us per record through a fresh set of task parts, commits included."""
    with running_tasks(workdir, bootstrap, topology, application_id, PARTITIONS) as run:
        parts, collector = run.parts, run.collector
        started, since = time.thread_time(), 0
        for i in range(0, len(records), BATCH):
            since += parts.router.process(records[i : i + BATCH])
            collector.poll()
            if since >= params.commit_every:
                parts.committer.commit()
                since = 0
        parts.committer.commit()
        return 1e6 * (time.thread_time() - started) / len(records)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    result = Result(NAME, TITLE)
    dsl, papi = min(measured.dsl_us), min(measured.papi_us)
    result.rows += [
        Row(
            metric="CPU per record, count per key",
            measured=dsl,
            measured_label="the DSL (group_by_key().count())",
            baseline=papi,
            baseline_label="the Processor API, by hand",
            unit="us",
            target=CPU_TARGET,
        ),
        Row(
            metric="input records/s, count per key after a re-key",
            measured=max(measured.hop_rates),
            measured_label="one repartition hop (2 sub-topologies)",
            baseline=max(measured.plain_rates),
            baseline_label="the same count without the hop",
            unit="records/s",
            target=HOP_TARGET,
        ),
        Row(
            metric="worker CPU per input record, count per key after a re-key",
            measured=min(thread for _, thread in measured.hop_cpu),
            measured_label="one repartition hop, processing thread",
            baseline=min(thread for _, thread in measured.plain_cpu),
            baseline_label="the same count without the hop",
            unit="us",
            target=HOP_CPU_TARGET,
        ),
    ]
    result.facts = {
        "records": params.records,
        "keys": params.keys,
        "partitions": PARTITIONS,
        "reps": params.reps,
        "commit_every": params.commit_every,
        "batch": BATCH,
        "process_runs": params.process_runs,
        "broker": "Apache Kafka" if measured.broker == "kafka" else "the embedded broker",
    }
    headers = ["us per record", *(f"run {i + 1}" for i in range(len(measured.dsl_us)))]
    result.details.append(
        table(
            headers,
            [
                ["DSL", *(f"{v:.2f}" for v in measured.dsl_us)],
                ["Processor API", *(f"{v:.2f}" for v in measured.papi_us)],
            ],
        )
    )
    runs = range(len(measured.hop_rates))
    result.details.append(
        table(
            ["input records/s", *(f"run {i + 1}" for i in runs)],
            [
                ["without the hop", *(f"{v:,.0f}" for v in measured.plain_rates)],
                ["one repartition hop", *(f"{v:,.0f}" for v in measured.hop_rates)],
            ],
        )
    )
    cpu_rows = [
        (label, runs)
        for label, runs in (("without the hop", measured.plain_cpu), ("one hop", measured.hop_cpu))
    ]
    result.details.append(
        table(
            ["worker CPU us per input record", *(f"run {i + 1}" for i in runs)],
            [
                [f"{label}: {part}", *(f"{run[i]:.2f}" for run in cpu)]
                for label, cpu in cpu_rows
                for i, part in enumerate(("process", "processing thread"))
            ],
        )
    )
    return result
