"""Kafka Streams itself as the baseline: the same topologies, the same broker, the same run.

Issue 29, item 5: "Kafka Streams 4.x itself as a baseline on the same broker: the same
count-and-sum and tumbling-window topologies written in Java and built with Maven. It is
the system users compare us with."

Both topologies read the same input (``{"amount": n}`` under string keys drawn uniformly,
in 4 partitions, event times climbing over an hour as in :mod:`benchmarks.windowed`) and
write one output per input, the new ``{"count", "sum"}`` as JSON:

* count and sum per key (:func:`benchmarks.apps.count_and_sum_app`; in Java
  ``groupByKey().aggregate()`` into a RocksDB store with a changelog);
* count and sum per key per tumbling minute with 10 s grace, emit on update
  (:func:`benchmarks.apps.windowed_count_and_sum_app`; ``windowedBy(TimeWindows)``).

Kafka Streams runs with one stream thread (a worker process has one processing thread)
and its record cache off (``statestore.cache.max.bytes=0``), so it too forwards every
update, as the worker does. Each pair of runs (ours, theirs; the order alternates round
by round) uses one processing guarantee and one commit interval for both, a new group
each, on one Apache Kafka broker. Rates are the slope of the processed count between 10%
and 90% of the input; CPU per record is the process's CPU time over that same window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import count_sum, plots, profiling, throughput, windowed
from benchmarks.apps import SUMS_INPUT, SUMS_OUTPUT, WINDOWED_OUTPUT
from benchmarks.count_sum import amount_records
from benchmarks.harness import RunContext, start_broker
from benchmarks.kafka_io import create_topics, produce
from benchmarks.kafka_streams_build import ensure_built
from benchmarks.kafka_streams_runs import (
    JVM_HEAP,
    OTHER_THREADS,
    THREAD_KINDS,
    Run,
    records_in,
    streams_run,
    worker_run,
)
from benchmarks.measure import steady_rate_or_span
from benchmarks.results import PlotPath, Result, Row, table
from worker.dev.kafka_install import KAFKA_VERSION

NAME = "kafka_streams"
TITLE = "Against Kafka Streams: the same topologies on the same Kafka broker"
RUNS_ON_BROKER = "kafka"  # Kafka Streams needs the real thing, whatever --broker says
PARTITIONS = 4
TOPOLOGIES = {  # the Java topology's name -> our app
    "count_sum": "benchmarks.apps:count_and_sum_app",
    "windowed": "benchmarks.apps:windowed_count_and_sum_app",
}
LABELS = {"count_sum": "count and sum", "windowed": "tumbling minutes, emit on update"}
GUARANTEES = ("at_least_once", "exactly_once_v2")


@dataclass(frozen=True)
class Params:
    records: int
    keys: int
    commit_interval_ms: int = 1000
    rounds: int = 2  # pairs of runs per topology and guarantee, the order alternating
    guarantees: tuple[str, ...] = GUARANTEES
    # One more Kafka Streams run per topology, at-least-once, its record cache on at its
    # default size: what a user gets out of the box (fewer outputs: updates folded).
    cached: bool = True


FULL = Params(records=300_000, keys=60_000)
QUICK = Params(records=5_000, keys=1_000, rounds=1, guarantees=GUARANTEES[:1], cached=False)
CACHE_BYTES = 10 * 1024 * 1024  # statestore.cache.max.bytes' default
OUTPUTS = {"count_sum": SUMS_OUTPUT, "windowed": WINDOWED_OUTPUT}


@dataclass(frozen=True)
class Pair:
    topology: str
    guarantee: str
    ours_first: bool
    ours: Run
    theirs: Run


@dataclass(frozen=True)
class Cached:
    """Kafka Streams with its record cache on: the run and the outputs it wrote."""

    run: Run
    outputs: int


@dataclass(frozen=True)
class Measured:
    params: Params
    pairs: list[Pair]
    cached: dict[str, Cached]  # topology -> its run with the record cache on
    profiles: dict[str, tuple[profiling.Summary, dict[str, float]]]  # topology -> profile


def measure(ctx: RunContext, params: Params) -> Measured:
    build = ensure_built()  # Maven, the first time only: before anything is timed
    broker = start_broker(ctx, "broker-kafka-streams", kind=RUNS_ON_BROKER)
    bootstrap = broker.bootstrap
    create_topics(
        bootstrap, {SUMS_INPUT: PARTITIONS, SUMS_OUTPUT: PARTITIONS, WINDOWED_OUTPUT: PARTITIONS}
    )
    first_ms = (int(time.time() * 1000) - 2 * windowed.SPAN_MS) // 60_000 * 60_000
    produce(
        bootstrap, SUMS_INPUT, amount_records(params.records, params.keys, seed=22),
        timestamps=windowed.event_times(params.records, first_ms),
    )  # fmt: skip
    pairs = []
    cached: dict[str, Cached] = {}
    for topology, app in TOPOLOGIES.items():
        for guarantee in params.guarantees:
            settings: dict[str, object] = {
                "processing.guarantee": guarantee,
                "commit.interval.ms": params.commit_interval_ms,
                "num.standby.replicas": 0,
            }
            for i in range(params.rounds):
                name = f"{topology}-{guarantee}-{i + 1}"
                ours_first = i % 2 == 0
                runs: dict[str, Run] = {}
                for side in ("ours", "theirs") if ours_first else ("theirs", "ours"):
                    if side == "ours":
                        runs[side] = worker_run(
                            ctx, bootstrap, f"worker-{name}", app, settings, params.records
                        )
                    else:
                        runs[side] = streams_run(
                            ctx, build, bootstrap, f"streams-{name}", topology, settings,
                            params.records,
                        )  # fmt: skip
                pairs.append(Pair(topology, guarantee, ours_first, runs["ours"], runs["theirs"]))
        if params.cached:
            cached[topology] = _cached_run(ctx, build, bootstrap, topology, params)
    profiles = {}
    if ctx.profile:
        for topology, app in TOPOLOGIES.items():
            profiles[topology] = _profile(ctx, bootstrap, topology, app, params)
    broker.stop(timeout=15.0)
    return Measured(params, pairs, cached, profiles)


def _cached_run(
    ctx: RunContext, build: Path, bootstrap: str, topology: str, params: Params
) -> Cached:
    settings: dict[str, object] = {
        "processing.guarantee": GUARANTEES[0],
        "commit.interval.ms": params.commit_interval_ms,
    }
    before = records_in(bootstrap, OUTPUTS[topology])
    run = streams_run(
        ctx, build, bootstrap, f"streams-{topology}-cached", topology, settings, params.records,
        cache_bytes=CACHE_BYTES,
    )  # fmt: skip
    return Cached(run, records_in(bootstrap, OUTPUTS[topology]) - before)


def _profile(
    ctx: RunContext, bootstrap: str, topology: str, app: str, params: Params
) -> tuple[profiling.Summary, dict[str, float]]:
    """Our worker once more, at-least-once, py-spy attached (not measured)."""
    settings: dict[str, object] = {
        "commit.interval.ms": params.commit_interval_ms,
        "num.standby.replicas": 0,
    }
    name = f"{NAME}-{topology}"
    sources = profiling.snapshot_sources()
    throughput.worker_run(
        ctx, bootstrap, f"profiled-{topology}", settings, params.records, name, app=app
    )
    raw = ctx.path("profiles", f"{name}.txt")
    within = "Worker._run_loop"
    categories = count_sum.CATEGORIES if topology == "count_sum" else windowed.CATEGORIES
    shares = dict(profiling.breakdown(raw, within, categories, sources, throughput.LOOP))
    return profiling.summarise(raw, within, sources), shares


def _best(pairs: list[Pair], side: str, records: int) -> tuple[float, float]:
    """The best rate of ``side`` among ``pairs`` and the CPU per record of that run."""
    runs: list[Run] = [getattr(p, side) for p in pairs]
    best = max(runs, key=lambda r: steady_rate_or_span(r.processed, records))
    return steady_rate_or_span(best.processed, records), best.cpu_per_record_us(records)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    records = params.records
    result = Result(NAME, TITLE)
    curves: dict[str, list[tuple[float, float]]] = {}
    for topology in TOPOLOGIES:
        for guarantee in params.guarantees:
            pairs = [
                p for p in measured.pairs if (p.topology, p.guarantee) == (topology, guarantee)
            ]
            ours, ours_cpu = _best(pairs, "ours", records)
            theirs, theirs_cpu = _best(pairs, "theirs", records)
            what = f"{LABELS[topology]}, {guarantee}"
            result.rows.append(
                Row(
                    metric=f"records/s, {what}", measured=ours, measured_label="worker, 1 process",
                    baseline=theirs, baseline_label="Kafka Streams, 1 stream thread",
                    unit="records/s",
                )
            )  # fmt: skip
            result.rows.append(
                Row(
                    metric=f"CPU per record, {what}", measured=ours_cpu,
                    measured_label="worker", baseline=theirs_cpu,
                    baseline_label="Kafka Streams", unit="us",
                )
            )  # fmt: skip
            if guarantee == params.guarantees[0]:
                curves[f"worker, {LABELS[topology]} ({ours:,.0f}/s)"] = max(
                    (p.ours.processed for p in pairs), key=lambda s: steady_rate_or_span(s, records)
                )
                curves[f"Kafka Streams, {LABELS[topology]} ({theirs:,.0f}/s)"] = max(
                    (p.theirs.processed for p in pairs),
                    key=lambda s: steady_rate_or_span(s, records),
                )
    for topology, cached in measured.cached.items():
        pairs = [
            p for p in measured.pairs if (p.topology, p.guarantee) == (topology, GUARANTEES[0])
        ]
        ours, _ = _best(pairs, "ours", records)
        result.rows.append(
            Row(
                metric=f"records/s, {LABELS[topology]}, {GUARANTEES[0]}, against Kafka Streams "
                "with its record cache on",
                measured=ours, measured_label="worker, one output per input",
                baseline=steady_rate_or_span(cached.run.processed, records),
                baseline_label=f"Kafka Streams, 10 MiB cache: {cached.outputs:,} outputs",
                unit="records/s",
            )
        )  # fmt: skip
    result.facts = {
        "records": records,
        "keys": params.keys,
        "partitions": PARTITIONS,
        "commit_interval_ms": params.commit_interval_ms,
        "rounds": params.rounds,
        "kafka_version": KAFKA_VERSION,
        "apps": "`, `".join(TOPOLOGIES.values()),
        "jvm_heap": JVM_HEAP,
    }
    result.details.append(_runs_table(measured.pairs, records))
    if measured.cached:
        result.details.append(_cached_table(measured.cached, records))
    result.details.append(_threads_table(measured.pairs, params.guarantees[0], records))
    for topology, (summary, shares) in measured.profiles.items():
        rows = [[label, f"{share:.0%}"] for label, share in shares.items()]
        result.details.append(
            table(
                [f"{LABELS[topology]}: our processing thread's busy time (profiled run)", "share"],
                rows,
            )
        )
        result.details.append(
            profiling.markdown(summary, f"Profile of our worker, {LABELS[topology]}")
        )
    result.plots.append(
        plots.progress(
            plot_path(NAME),
            f"Worker and Kafka Streams, {params.guarantees[0]}: records done over time",
            curves, total=records,
        )
    )  # fmt: skip
    return result


def _runs_table(pairs: list[Pair], records: int) -> str:
    headers = ["topology", "guarantee", "first", "worker records/s", "Kafka Streams records/s"]
    headers += ["ratio", "worker CPU us/record", "Kafka Streams CPU us/record", "CPU ratio"]
    headers += ["launch to last record, worker / Kafka Streams (s)"]
    rows = []
    for p in pairs:
        ours = steady_rate_or_span(p.ours.processed, records)
        theirs = steady_rate_or_span(p.theirs.processed, records)
        ours_cpu, theirs_cpu = (
            p.ours.cpu_per_record_us(records),
            p.theirs.cpu_per_record_us(records),
        )
        row = [LABELS[p.topology], p.guarantee, "worker" if p.ours_first else "Kafka Streams"]
        row += [f"{ours:,.0f}", f"{theirs:,.0f}", f"{ours / theirs:.2f}"]
        row += [f"{ours_cpu:.1f}", f"{theirs_cpu:.1f}", f"{ours_cpu / theirs_cpu:.2f}"]
        row += [f"{p.ours.seconds:.1f} / {p.theirs.seconds:.1f}"]
        rows.append(row)
    return table(headers, rows, left=3)


def _cached_table(cached: dict[str, Cached], records: int) -> str:
    headers = ["Kafka Streams, record cache on (10 MiB), at_least_once", "records/s"]
    headers += ["CPU us/record", "outputs written", "outputs per input"]
    rows = [
        [
            LABELS[topology],
            f"{steady_rate_or_span(c.run.processed, records):,.0f}",
            f"{c.run.cpu_per_record_us(records):.1f}",
            f"{c.outputs:,}",
            f"{c.outputs / records:.2f}",
        ]
        for topology, c in cached.items()
    ]
    return table(headers, rows)


def _threads_table(pairs: list[Pair], guarantee: str, records: int) -> str:
    """Where each side's CPU went, by kind of thread, in its best run under ``guarantee``
    (whole runs: start-up and JIT compilation included)."""
    columns: dict[str, dict[str, float]] = {}
    for topology in TOPOLOGIES:
        mine = [p for p in pairs if (p.topology, p.guarantee) == (topology, guarantee)]
        for side, label in (("ours", "worker"), ("theirs", "Kafka Streams")):
            runs: list[Run] = [getattr(p, side) for p in mine]
            best = max(runs, key=lambda r: steady_rate_or_span(r.processed, records))
            columns[f"{label}, {LABELS[topology]}"] = best.threads
    kinds = [k for k, _ in THREAD_KINDS] + [OTHER_THREADS]
    kinds = [k for k in kinds if any(c.get(k) for c in columns.values())]
    rows = []
    for kind in kinds:
        row = [kind]
        for threads in columns.values():
            total = sum(threads.values())
            row.append(f"{threads.get(kind, 0.0) / total:.0%}" if total else "")
        rows.append(row)
    rows.append(["CPU seconds, whole run", *(f"{sum(t.values()):.1f}" for t in columns.values())])
    return table([f"CPU by thread, {guarantee}, best run", *columns], rows)
