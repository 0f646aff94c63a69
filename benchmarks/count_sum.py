"""Count and sum per key at a small and a large key space, versus raw consume-and-produce.

Issue 14, item 5: "a count-and-sum topology over 200k keys and 1M records: >= 0.20 of
that ceiling". The topology (:func:`benchmarks.apps.count_and_sum_app`) is what a user
would write against the public topology API: per record one store read, one write and
one output (the new totals), at-least-once, a commit every 5 s, 4 partitions.

Each key space gets its own broker and its own input (``records`` records, keys drawn
uniformly from ``keys`` keys), read by

* the ceiling: raw confluent-kafka consume-and-produce of the same records
  (:func:`benchmarks.baselines.consume_and_produce`), before the worker run and after;
* one worker, its rate the slope of ``worker_processed_records_total`` between 10% and
  90% of the input, like :mod:`benchmarks.throughput`.

With profiling on, a second worker run per key space is sampled by py-spy, and the
commit's share is split into its steps: changelog records produced, the producer
flushed (every record acknowledged), the RocksDB batches written, the offsets committed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from benchmarks import plots, profiling, throughput
from benchmarks.apps import SUMS_INPUT, SUMS_OUTPUT
from benchmarks.baselines import consume_and_produce
from benchmarks.harness import RunContext, start_broker
from benchmarks.kafka_io import Record, create_topics, produce
from benchmarks.measure import steady_rate_or_span
from benchmarks.results import PlotPath, Result, Row, Target, table
from worker.serde import JSON, STR

NAME = "count_sum"
TITLE = "Count and sum per key: small and large key spaces"
APP = "benchmarks.apps:count_and_sum_app"
PARTITIONS = 4
TARGET = 0.20  # issue 14, at 200k keys

APP_CODE = "the topology's own code (`benchmarks/apps.py`)"
CATEGORIES = throughput.categories(APP_CODE, "benchmarks/apps.py")
# The commit's steps (tasks/commit_protocols.py AtLeastOnceCommit), as shares of all busy samples.
COMMIT_STEPS = [
    profiling.Category("changelog records produced", under=("Task.produce_changelogs",)),
    profiling.Category("producer flushed (waiting for acks)", under=("RecordCollector.flush",)),
    profiling.Category("RocksDB batches written", under=("Task.commit_stores",)),
    profiling.Category("source offsets committed", under=("GroupMember.commit",)),
]
OUTSIDE_COMMIT = "not committing"
COMMIT_METRICS = ("worker_commit_seconds_count", "worker_commit_seconds_sum")


@dataclass(frozen=True)
class Params:
    records: int
    key_spaces: tuple[int, ...]
    commit_interval_ms: int = 5000


FULL = Params(records=1_000_000, key_spaces=(10_000, 200_000))
QUICK = Params(records=20_000, key_spaces=(100, 2_000), commit_interval_ms=1000)

Samples = list[tuple[float, float]]


@dataclass(frozen=True)
class Profile:
    summary: profiling.Summary
    shares: dict[str, float]  # category -> share of the busy samples
    commit_steps: dict[str, float]  # commit step -> share of the busy samples


@dataclass(frozen=True)
class KeySpace:
    """One key space's runs on its own broker."""

    keys: int
    ceilings: list[Samples]
    worker: Samples
    seconds: float  # worker launch to last record
    profile: Profile | None
    commits: float  # commits the measured run made (worker_commit_seconds_count)
    commit_seconds: float  # the time they took in all (worker_commit_seconds_sum)

    def ceiling_rate(self, records: int) -> float:
        return max(steady_rate_or_span(s, records) for s in self.ceilings)

    def worker_rate(self, records: int) -> float:
        return steady_rate_or_span(self.worker, records)


@dataclass(frozen=True)
class Measured:
    params: Params
    spaces: list[KeySpace]


def amount_records(records: int, keys: int, seed: int = 14) -> Iterator[Record]:
    """``records`` amounts under keys drawn uniformly from ``keys`` keys."""
    rng = random.Random(seed)
    names = [STR.serialize(f"key-{i:07d}") for i in range(keys)]
    for _ in range(records):
        yield rng.choice(names), JSON.serialize({"amount": rng.randrange(1, 10_000)})  # type: ignore[misc]


def measure(ctx: RunContext, params: Params) -> Measured:
    settings: dict[str, object] = {
        "commit.interval.ms": params.commit_interval_ms,
        "num.standby.replicas": 0,
    }
    spaces = []
    for keys in params.key_spaces:
        broker = start_broker(ctx, f"broker-{keys}")
        bootstrap = broker.bootstrap
        create_topics(
            bootstrap, {SUMS_INPUT: PARTITIONS, SUMS_OUTPUT: PARTITIONS, "ceiling-out": PARTITIONS}
        )
        produce(bootstrap, SUMS_INPUT, amount_records(params.records, keys))
        ceilings = [consume_and_produce(bootstrap, SUMS_INPUT, "ceiling-out")]
        commits = dict.fromkeys(COMMIT_METRICS, 0.0)
        samples, seconds = throughput.worker_run(
            ctx, bootstrap, f"worker-{keys}", settings, params.records, app=APP,
            final_metrics=commits,
        )  # fmt: skip
        ceilings.append(consume_and_produce(bootstrap, SUMS_INPUT, "ceiling-out"))
        profile = _profile(ctx, bootstrap, settings, params, keys) if ctx.profile else None
        spaces.append(
            KeySpace(
                keys, ceilings, samples, seconds, profile,
                commits["worker_commit_seconds_count"], commits["worker_commit_seconds_sum"],
            )
        )  # fmt: skip
        broker.stop(timeout=3.0)  # the next key space's broker gets the machine alone
    return Measured(params, spaces)


def _profile(
    ctx: RunContext, bootstrap: str, settings: dict[str, object], params: Params, keys: int
) -> Profile:
    sources = profiling.snapshot_sources()
    name = f"count_sum-{keys}"
    throughput.worker_run(
        ctx, bootstrap, f"profiled-{keys}", settings, params.records, name, app=APP
    )
    raw = ctx.path("profiles", f"{name}.txt")
    within = "Worker._run_loop"
    summary = profiling.summarise(raw, within, sources)
    shares = dict(profiling.breakdown(raw, within, CATEGORIES, sources, throughput.LOOP))
    steps = dict(profiling.breakdown(raw, within, COMMIT_STEPS, sources, OUTSIDE_COMMIT))
    steps.pop(OUTSIDE_COMMIT)
    return Profile(summary, shares, steps)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    result = Result(NAME, TITLE)
    largest = max(s.keys for s in measured.spaces)
    curves: dict[str, Samples] = {}
    for space in measured.spaces:
        rate, ceiling = space.worker_rate(params.records), space.ceiling_rate(params.records)
        result.rows.append(
            Row(
                metric="records/s, "
                + ("large key space" if space.keys == largest else "small key space"),
                measured=rate,
                measured_label=f"count and sum, {space.keys:,} keys, 1 worker",
                baseline=ceiling,
                baseline_label="raw consume-and-produce",
                unit="records/s",
                target=Target(">=", TARGET, "issue 14") if space.keys == largest else None,
            )
        )
        curves[f"{space.keys:,} keys ({rate:,.0f}/s)"] = space.worker
        curves[f"ceiling, {space.keys:,} keys' input ({ceiling:,.0f}/s)"] = max(
            space.ceilings, key=lambda s: steady_rate_or_span(s, params.records)
        )
    result.facts = {
        "records": params.records,
        "partitions": PARTITIONS,
        "app": APP,
        "commit_interval_ms": params.commit_interval_ms,
    }
    result.details.append(_spaces_table(measured.spaces, params.records))
    for space in measured.spaces:
        if space.profile is not None:
            result.details += _profile_details(space.keys, space.profile)
    result.plots.append(
        plots.progress(
            plot_path(NAME), "Count and sum: records done over time", curves, total=params.records
        )
    )
    profiled = {
        f"{s.keys:,} keys": s.profile.summary for s in measured.spaces if s.profile is not None
    }
    if profiled:
        result.plots.append(plots.profile(plot_path(f"{NAME}-profile"), profiled))
    return result


def _spaces_table(spaces: list[KeySpace], records: int) -> str:
    headers = ["keys", "worker records/s", "us per record", "launch to last record (s)"]
    headers += ["ceiling runs, records/s", "ceiling us per record", "commits"]
    headers += ["commit time (s)", "per commit (s)", "commits' share of the run"]
    rows = []
    for space in spaces:
        rate, ceiling = space.worker_rate(records), space.ceiling_rate(records)
        ceilings = ", ".join(f"{steady_rate_or_span(c, records):,.0f}" for c in space.ceilings)
        row = [f"{space.keys:,}", f"{rate:,.0f}", f"{1e6 / rate:.1f}", f"{space.seconds:.1f}"]
        row += [ceilings, f"{1e6 / ceiling:.2f}", f"{space.commits:.0f}"]
        if space.commits:
            row += [f"{space.commit_seconds:.2f}", f"{space.commit_seconds / space.commits:.2f}"]
            row += [f"{space.commit_seconds / space.seconds:.0%}"]
        else:
            row += ["", "", ""]
        rows.append(row)
    return table(headers, rows)


def _profile_details(keys: int, profile: Profile) -> list[str]:
    """Where the profiled run's processing thread went, and the commit's steps."""
    shares = [[label, f"{share:.0%}"] for label, share in profile.shares.items()]
    steps = [[label, f"{share:.0%}"] for label, share in profile.commit_steps.items()]
    return [
        table([f"{keys:,} keys: the processing thread's busy time (profiled run)", "share"], shares)
        + "\n\n"
        + table(["the commit's steps", "share of the commit"], steps),
        profiling.markdown(profile.summary, f"Profile at {keys:,} keys"),
    ]
