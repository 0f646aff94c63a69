"""What a stream-table join costs (issue 31, item 9), against the lookup it replaces.

CPU per stream record, in one process of its own, through the real task layer
(:func:`benchmarks.task_layer.running_tasks`), over records fetched beforehand, the least
CPU time (``time.thread_time``) of ``reps`` alternating runs, a commit every
``commit_every`` records, as :mod:`benchmarks.dsl_cost` measures:

* the baseline: the lookup written by hand, as the example app did before joins: a
  processor reading the co-partitioned table's store (``Topology.add_table``) and
  forwarding ``joiner(payment, profile)``;
* ``stream.join(table, joiner)`` in the DSL, the table holding the latest values;
* the same join with a versioned table (``builder.table(..., history_ms=)``): each
  payment joins the profile as of its own time. The table's versions are all older than
  the payments (a table loaded in batches, a stream in real time), so this is the read
  of the newest version. Target for both: at most 1.2x the baseline;
* beside them, with no target: the versioned join when the payments' times fall among
  the table's versions (each read reaches into history: a reverse seek), and the
  versioned store's history sweep (``VersionedStore.sweep_history``) by itself, per
  key examined, against a version written.

Each run first feeds the table's records (``versions`` per key, unmeasured), commits,
then times the payments.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkFailed, RunContext, new_application_id, start_broker
from benchmarks.in_process import BATCH, cpu_us_per_record, feed
from benchmarks.kafka_io import Record, create_topics, produce
from benchmarks.results import PlotPath, Result, Row, Target, table
from benchmarks.spawned import measure_in_child
from benchmarks.task_layer import fetch, running_tasks
from worker.dsl import StreamsBuilder
from worker.processing import ProcessorContext, Topology
from worker.processing.topology import BuiltTopology
from worker.serde import JSON, STR
from worker.state import versioned_format as fmt
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.versioned_store import VersionedStore

NAME = "join_cost"
TITLE = "Stream-table joins against the hand-written lookup they replace"
PAYMENTS = "jc-payments"
PAST_PAYMENTS = "jc-payments-past"  # times among the table's versions
PROFILES = "jc-profiles"
OUTPUT = "jc-enriched"
STORE = "profiles"
PARTITIONS = 4
CHILD_TIMEOUT_S = 900.0
TARGET = Target("<=", 1.2, "issue 31")
BASE_MS = 1_700_000_000_000
VERSION_STEP_MS = 3_600_000  # an hour between a key's versions
HISTORY_MS = 7 * 86_400_000  # a week: every version of the run stays readable

WAYS = ("by hand", "join", "versioned join", "versioned join, into history")


@dataclass(frozen=True)
class Params:
    payments: int
    accounts: int
    versions: int = 3  # table versions per key
    reps: int = 5
    commit_every: int = 30_000  # about a second of processing
    sweep_keys: int = 100_000  # keys of the sweep's own store


FULL = Params(payments=200_000, accounts=10_000, reps=7)
QUICK = Params(payments=10_000, accounts=500, reps=1, commit_every=5_000, sweep_keys=5_000)


@dataclass(frozen=True)
class Measured:
    params: Params
    cpu_us: dict[str, list[float]]  # way -> CPU us per payment, each run
    idle_sweep_us: list[float]  # CPU us per key examined by a pass pruning nothing
    sweep_us: list[float]  # CPU us per key examined by a pass pruning every key
    put_us: list[float]  # CPU us per version written, each run


# -- the topologies ---------------------------------------------------------------------


def enrich(payment: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """The joiner of every way: the payment's amount beside its account's profile."""
    return {"amount_cents": payment["amount_cents"], "mean": profile["mean"]}


def lookup_by_hand(ctx: ProcessorContext, key: str, payment: dict[str, Any]) -> None:
    profile = ctx.store(STORE).get(key)
    if profile is not None:
        ctx.forward(key, enrich(payment, profile))


def by_hand(source: str) -> BuiltTopology:
    """The lookup written with the Processor API over a co-partitioned table."""
    return (
        Topology()
        .add_source("in", source, key_serde=STR, value_serde=JSON)
        .add_table(STORE, PROFILES, key_serde=STR, value_serde=JSON)
        .add_processor("lookup", lookup_by_hand, parents=["in"], stores=[STORE])
        .add_sink("out", OUTPUT, parents=["lookup"], key_serde=STR, value_serde=JSON)
        .build()
    )


def joined(source: str, history_ms: int | None, application_id: str) -> BuiltTopology:
    """``stream.join(table, enrich)`` in the DSL, the table versioned with ``history_ms``."""
    builder = StreamsBuilder()
    profiles = builder.table(PROFILES, name=STORE, history_ms=history_ms)
    builder.stream(source).join(profiles, enrich).to(OUTPUT)
    return builder.build(application_id).build()


def _topology(way: str, application_id: str) -> BuiltTopology:
    if way == "by hand":
        return by_hand(PAYMENTS)
    if way == "join":
        return joined(PAYMENTS, None, application_id)
    if way == "versioned join":
        return joined(PAYMENTS, HISTORY_MS, application_id)
    return joined(PAST_PAYMENTS, HISTORY_MS, application_id)


# -- the input --------------------------------------------------------------------------


def _profiles(params: Params) -> tuple[list[Record], list[int]]:
    """``versions`` profiles per account, a version an hour, in time order."""
    rng = random.Random(5)
    records, times = [], []
    for version in range(params.versions):
        for i in range(params.accounts):
            mean = round(rng.uniform(1_000, 50_000), 2)
            value = {"mean": mean, "std": round(mean * 0.1, 2), "n": 50 + version}
            records.append((STR.serialize(f"acct-{i:05d}"), JSON.serialize(value)))
            times.append(BASE_MS + version * VERSION_STEP_MS + i)
    return records, times


def _payments(params: Params, first_ms: int, span_ms: int) -> tuple[list[Any], list[int]]:
    """Payments over random accounts, their times spread evenly over ``span_ms`` from
    ``first_ms``."""
    rng = random.Random(9)
    records, times = [], []
    for n in range(params.payments):
        key = STR.serialize(f"acct-{rng.randrange(params.accounts):05d}")
        records.append(
            (key, JSON.serialize({"id": f"p-{n}", "amount_cents": rng.randrange(10**6)}))
        )
        times.append(first_ms + n * span_ms // params.payments)
    return records, times


def measure(ctx: RunContext, params: Params) -> Measured:
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    topics = {PAYMENTS: PARTITIONS, PAST_PAYMENTS: PARTITIONS, PROFILES: PARTITIONS}
    create_topics(
        bootstrap, {**topics, OUTPUT: PARTITIONS}, {PROFILES: {"cleanup.policy": "compact"}}
    )
    profiles, times = _profiles(params)
    produce(bootstrap, PROFILES, profiles, timestamps=times)
    after = BASE_MS + params.versions * VERSION_STEP_MS
    records, times = _payments(params, after, VERSION_STEP_MS)
    produce(bootstrap, PAYMENTS, records, timestamps=times)
    records, times = _payments(params, BASE_MS, params.versions * VERSION_STEP_MS)
    produce(bootstrap, PAST_PAYMENTS, records, timestamps=times)
    cpu_us, sweeps = measure_in_child(
        ctx, _cpu_runs, bootstrap, ctx.path("runs"), params, timeout_s=CHILD_TIMEOUT_S
    )
    return Measured(params, cpu_us, *sweeps)


# -- in the measuring process -------------------------------------------------------------


def _cpu_runs(
    bootstrap: str, workdir: Path, params: Params
) -> tuple[dict[str, list[float]], tuple[list[float], list[float], list[float]]]:
    inputs = {topic: fetch(bootstrap, topic) for topic in (PROFILES, PAYMENTS, PAST_PAYMENTS)}
    expected = {PROFILES: params.accounts * params.versions}
    for topic, found in inputs.items():
        if len(found) != expected.get(topic, params.payments):
            raise BenchmarkFailed(f"fetched {len(found):,} records of {topic}")
    runs: dict[str, list[float]] = {way: [] for way in WAYS}
    sweeps: tuple[list[float], list[float], list[float]] = ([], [], [])
    # One warm-up round (imports, caches), then the ways in turns, the order rotating.
    for rep in range(-1, params.reps):
        shift = rep % len(WAYS)
        for way in WAYS[shift:] + WAYS[:shift]:
            app_id = new_application_id("bench-join")
            source = PAST_PAYMENTS if way.endswith("history") else PAYMENTS
            topology = _topology(way, app_id)
            with running_tasks(workdir, bootstrap, topology, app_id, PARTITIONS) as run:
                feed(run, inputs[PROFILES], params.commit_every)
                cpu = cpu_us_per_record(run, inputs[source], params.commit_every)
            if rep >= 0:
                runs[way].append(cpu)
        measured = _sweep_run(workdir / f"sweep-{rep}", params.sweep_keys)
        for column, value in zip(sweeps, measured, strict=True):
            if rep >= 0:
                column.append(value)
    return runs, sweeps


def _sweep_run(path: Path, keys: int) -> tuple[float, float, float]:
    """CPU us per key examined by history sweeps (a pass with nothing to prune, a pass
    pruning every key) and per version written: ``keys`` keys written twice, an hour
    apart; a newer write of another key moves the cutoff (first nothing to prune, then
    every key's older version), and each time sweeps run to the end of a pass, a commit
    after each."""
    store = VersionedStore.open_versioned(path, RocksDBEnv(64 * MiB), "sweep", 3_600_000)
    try:
        names = [b"k%08d" % i for i in range(keys)]
        started = time.thread_time()
        for ts in (0, 3_600_000):
            for key in names:
                store.put_version(key, b"v" * 40, ts)
            store.commit({})
        put_us = 1e6 * (time.thread_time() - started) / (2 * keys)
        passes = []
        for newest in (3_600_001, 7_300_000):  # the cutoff past nothing, then past the first
            store.put_version(b"newest", b"v", newest)
            store.commit({})
            examined, started = 0, time.thread_time()
            while True:
                swept = store.sweep_history()
                store.commit({})
                examined += swept.examined
                if not swept.more:
                    break
            passes.append(1e6 * (time.thread_time() - started) / max(examined, 1))
        with store.scan(fmt.HISTORY_PREFIX, fmt.OBSERVED_MS) as entries:
            left = sum(1 for _ in entries)
        # Each key's newest version; the newest key's two (one is valid at the cutoff).
        if left != keys + 2:
            raise BenchmarkFailed(f"the sweep left {left:,} versions, not {keys + 2:,}")
        return passes[0], passes[1], put_us
    finally:
        store.close()


# -- the report ---------------------------------------------------------------------------


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    best = {way: min(runs) for way, runs in measured.cpu_us.items()}
    result = Result(NAME, TITLE)
    hand = "the lookup by hand (Processor API, co-partitioned table)"
    result.rows += [
        Row("CPU per record, stream-table join, latest value", best["join"],
            "stream.join(table)", best["by hand"], hand, "us", TARGET),
        Row("CPU per record, stream-table join, versioned table as of the record's time",
            best["versioned join"], "stream.join(table(history_ms=))", best["by hand"],
            hand, "us", TARGET),
        Row("CPU per record, versioned join reading into history",
            best["versioned join, into history"], "payments among the table's versions",
            best["by hand"], hand, "us"),
        Row("versioned store history sweep, CPU per key pruned", min(measured.sweep_us),
            "a pass pruning every key", min(measured.put_us), "a version written", "us"),
    ]  # fmt: skip
    result.facts = {
        "payments": params.payments,
        "accounts": params.accounts,
        "versions": params.versions,
        "partitions": PARTITIONS,
        "reps": params.reps,
        "commit_every": params.commit_every,
        "sweep_keys": params.sweep_keys,
        "history_days": HISTORY_MS // 86_400_000,
        "batch": BATCH,
    }
    headers = ["us per record", *(f"run {i + 1}" for i in range(len(measured.cpu_us[WAYS[0]])))]
    rows = [[way, *(f"{v:.2f}" for v in measured.cpu_us[way])] for way in WAYS]
    hand_runs = measured.cpu_us["by hand"]
    rows += [
        [f"{way} ÷ by hand, same round",
         *(f"{v / h:.2f}" for v, h in zip(measured.cpu_us[way], hand_runs, strict=True))]
        for way in ("join", "versioned join")
    ]  # fmt: skip
    rows += [
        ["history sweep, per key examined, nothing to prune",
         *(f"{v:.2f}" for v in measured.idle_sweep_us)],
        ["history sweep, per key examined, every key pruned",
         *(f"{v:.2f}" for v in measured.sweep_us)],
        ["a version written", *(f"{v:.2f}" for v in measured.put_us)],
    ]  # fmt: skip
    result.details.append(table(headers, rows))
    return result
