"""Per-record CPU, in one process: the worker's processing path against the same work by hand.

The same-run ratios of ``throughput`` and ``count_sum`` compare wall-clock rates of
separate processes, and on a shared virtual machine the ceiling alone moved between
430k and 1.25M records/s within a day (docs/benchmarks.md). This benchmark measures what
a change to the per-record path does with far less of that noise: CPU time of the one
thread doing the work (``time.thread_time``), in a process of its own, over records fetched
beforehand, the least of ``reps`` repetitions.

* The worker: the example app's topology through the real task layer (``RecordRouter``,
  ``Task``, ``TaskGraph``, typed store views, ``Store`` with its buffer and read cache,
  RocksDB, the ``RecordCollector``'s producers to the broker), restored through the real
  changelog reader, with a commit every ``commit_every`` records (changelog records
  produced and acknowledged, RocksDB batches). One part is replaced: the group member, by
  an in-memory book of source offsets (a commit sends those in one request, not one per
  record). The same path with the example app's processor replaced by one that does
  nothing is reported too: the framework and the payment's deserialisation alone. The
  app's tasks ``0_x`` are its scoring sub-topology (totals, last hour, quiet check, busy
  windows, and each payment forwarded to its joins' repartition topic); the joins, its
  second sub-topology, are not in this measure (``account-profiles`` records are fetched
  and routed, to no task).
* The baseline: the example app's own work written by hand over the same records: the
  payment decoded, the totals read, decoded, updated, encoded and written back, the
  profile read and decoded, the alert computed and produced, with the same serdes
  (orjson), plain dicts of bytes for the two stores and a bare confluent-kafka producer;
  no commits, no store, no changelog.

The ratio (baseline / worker) is the share of the worker's CPU per record that the app's
own work needs; the rest is the framework. No target: a low-noise measure to read beside
the throughput benchmark's same-run ratio.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import orjson

from benchmarks import plots
from benchmarks.harness import (
    BenchmarkFailed,
    RunContext,
    client_settings,
    new_application_id,
    start_broker,
)
from benchmarks.kafka_io import create_topics, produce
from benchmarks.results import PlotPath, Result, Row, table
from benchmarks.spawned import measure_in_child
from benchmarks.task_layer import fetch, running_tasks
from benchmarks.workload import (
    EXAMPLE_PARTITIONS,
    accounts,
    create_totals_changelog,
    payment_records,
    profile_records,
)
from worker.dev import sample_data
from worker.examples import payments as app
from worker.processing import ProcessorContext, Topology
from worker.processing.built_topology import BuiltTopology
from worker.serde import JSON, STR

NAME = "per_record"
TITLE = "Per-record CPU in one process: the worker against the same work by hand"
BATCH = 500  # records handed to the router at once (what one consume returns under load)


@dataclass(frozen=True)
class Params:
    payments: int
    accounts: int
    reps: int = 5
    commit_every: int = 150_000  # records; ~1 s of processing, as throughput's interval


FULL = Params(payments=300_000, accounts=10_000)
QUICK = Params(payments=20_000, accounts=1_000, reps=1, commit_every=10_000)


@dataclass(frozen=True)
class Measured:
    """CPU microseconds per payment of each repetition."""

    params: Params
    worker: list[float]
    worker_commit: list[float]  # of which in commits
    noop: list[float]  # the worker with a processor that does nothing
    by_hand: list[float]


def measure(ctx: RunContext, params: Params) -> Measured:
    """Load the input, then measure in a process of its own (:mod:`benchmarks.spawned`)."""
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    accts = accounts(params.accounts)
    sample_data.create_example_topics(client_settings(bootstrap), EXAMPLE_PARTITIONS)
    produce(bootstrap, app.PROFILES, profile_records(accts))
    produce(bootstrap, app.PAYMENTS, payment_records(accts, params.payments))
    return measure_in_child(ctx, _measure, bootstrap, ctx.path("runs"), params)


def _measure(bootstrap: str, workdir: Path, params: Params) -> Measured:
    """In the spawned process: fetch the input once, then alternate the three ways over it,
    ``reps`` times."""
    profiles, payments = fetch(bootstrap, app.PROFILES), fetch(bootstrap, app.PAYMENTS)
    if (len(profiles), len(payments)) != (params.accounts, params.payments):
        raise BenchmarkFailed(
            f"fetched {len(profiles):,} profiles and {len(payments):,} payments, not "
            f"{params.accounts:,} and {params.payments:,}"
        )
    worker: list[float] = []
    commits: list[float] = []
    noop: list[float] = []
    by_hand: list[float] = []
    for _ in range(params.reps):
        cpu, commit = _worker_run(workdir, bootstrap, _scoring, profiles, payments, params)
        worker.append(cpu)
        commits.append(commit)
        noop.append(_worker_run(workdir, bootstrap, _noop_topology, profiles, payments, params)[0])
        by_hand.append(_by_hand(bootstrap, profiles, payments))
    return Measured(params, worker, commits, noop, by_hand)


def _scoring(bootstrap: str, application_id: str) -> BuiltTopology:
    """The example app's topology, its joins' repartition topic created: tasks ``0_x``
    are its scoring sub-topology, which forwards each payment to that topic."""
    topology = app.build().build(application_id)
    topics = {r.topic: EXAMPLE_PARTITIONS for r in topology.repartition_topics}
    create_topics(bootstrap, topics)
    return topology.build()


def _noop_topology(_bootstrap: str, _application_id: str) -> BuiltTopology:
    """The example app's topology with a processor that does nothing."""

    def nothing(ctx: ProcessorContext, account: str, payment: dict[str, Any]) -> None:
        return None

    return (
        Topology()
        .add_source("payments", app.PAYMENTS, key_serde=STR, value_serde=JSON)
        .add_table(app.PROFILES, app.PROFILES, key_serde=STR, value_serde=JSON)
        .add_store(app.TOTALS, key_serde=STR, value_serde=JSON)
        .add_processor("score", nothing, parents=["payments"], stores=[app.TOTALS, app.PROFILES])
        .add_sink("alerts", app.ALERTS, parents=["score"], key_serde=STR, value_serde=JSON)
        .build()
    )


def _worker_run(
    workdir: Path,
    bootstrap: str,
    topology_for: Callable[[str, str], BuiltTopology],
    profiles: list[Any],
    payments: list[Any],
    params: Params,
) -> tuple[float, float]:
    """(CPU us per payment, of which in commits) through a fresh set of task parts."""
    application_id = new_application_id("bench-per-record")
    create_totals_changelog(bootstrap, application_id)
    topology = topology_for(bootstrap, application_id)
    with running_tasks(workdir, bootstrap, topology, application_id, EXAMPLE_PARTITIONS) as run:
        parts, collector = run.parts, run.collector
        for i in range(0, len(profiles), BATCH):
            parts.router.process(profiles[i : i + BATCH])
            collector.poll()
        parts.committer.commit()
        started, in_commits, since = time.thread_time(), 0.0, 0
        for i in range(0, len(payments), BATCH):
            since += parts.router.process(payments[i : i + BATCH])
            collector.poll()
            if since >= params.commit_every:
                in_commits += _timed(parts.committer.commit)
                since = 0
        in_commits += _timed(parts.committer.commit)
        spent = time.thread_time() - started
        return 1e6 * spent / len(payments), 1e6 * in_commits / len(payments)


def _timed(call: Callable[[], object]) -> float:
    started = time.thread_time()
    call()
    return time.thread_time() - started


def _by_hand(bootstrap: str, profiles: list[Any], payments: list[Any]) -> float:
    """CPU us per payment of the example app's work written by hand (see the module doc)."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    profile_bytes = {m.key(): m.value() for m in profiles}
    totals: dict[bytes, bytes] = {}
    recent: dict[bytes, bytes] = {}
    quiet_alert, recent_key = app.quiet_alert, app.recent_key
    next_totals, alert_for, loads, dumps = (
        app.next_totals,
        app.alert_for,
        orjson.loads,
        orjson.dumps,
    )
    started = time.thread_time()
    for msg in payments:
        key = msg.key()
        account, payment = key.decode(), loads(msg.value())
        stored = totals.get(key)
        at = msg.timestamp()[1]
        current = loads(stored) if stored is not None else None
        quiet = quiet_alert(account, current, at)
        if quiet is not None:
            producer.produce(app.QUIET, dumps(quiet), account.encode())
        totals[key] = dumps(next_totals(current, payment, at))
        recent[recent_key(account, at, payment["id"]).encode()] = dumps(payment["amount_cents"])
        profile = profile_bytes.get(key)
        alert = alert_for(payment, loads(profile) if profile is not None else None)
        if alert is not None:
            producer.produce(app.ALERTS, dumps(alert), account.encode())
    spent = time.thread_time() - started
    producer.flush(30)
    return 1e6 * spent / len(payments)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """The least CPU per record of each way, and their ratio."""
    params = measured.params
    result = Result(NAME, TITLE)
    worker, by_hand, noop = min(measured.worker), min(measured.by_hand), min(measured.noop)
    result.rows.append(
        Row(
            metric="CPU per record, us (in one process, records fetched beforehand)",
            measured=worker,
            measured_label="example app through the worker's task layer",
            baseline=by_hand,
            baseline_label="the same work by hand (orjson, dicts, a bare producer)",
            unit="us",
        )
    )
    commit = measured.worker_commit[measured.worker.index(worker)]

    own = max(worker - by_hand - commit, 0.0)
    result.facts = {
        "payments": params.payments,
        "accounts": params.accounts,
        "partitions": EXAMPLE_PARTITIONS,
        "batch": BATCH,
        "commit_every": params.commit_every,
    }
    runs = [
        ("worker", measured.worker),
        ("worker: of which commits", measured.worker_commit),
        ("worker, a processor doing nothing", measured.noop),
        ("by hand", measured.by_hand),
    ]
    headers = ["us per record", *(f"run {i + 1}" for i in range(len(measured.worker)))]
    parts = [
        ("the app's own work (by hand)", by_hand),
        ("commits", commit),
        ("the worker's own per-record path", worker - by_hand - commit),
    ]
    result.details += [
        table(headers, [[label, *(f"{v:.2f}" for v in values)] for label, values in runs]),
        table(
            [f"of the least worker run's {worker:.2f} us per record", "us", "share"],
            [[label, f"{us:.2f}", f"{us / worker:.0%}"] for label, us in parts],
        ),
    ]
    result.plots.append(
        plots.stacked(
            plot_path(NAME),
            "CPU per record (least of the runs)",
            {
                "worker": {
                    "the app's own work": by_hand,
                    "worker's own path": own,
                    "commits": commit,
                },
                "by hand": {"the app's own work": by_hand},
                "worker, processor\ndoing nothing": {"its path and the payment's decoding": noop},
            },
            "us per record",
        )
    )
    return result
