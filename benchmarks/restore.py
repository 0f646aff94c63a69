"""Restore: changelog records/s a worker restores into RocksDB versus a raw consume of them.

Issue 8, item 2. The example app's ``account-totals`` changelog is seeded with
``accounts x versions`` records (the embedded broker never compacts, so this is what a
restore reads); the profiles table is left empty so only that changelog is restored.
Then

* the ceiling: a raw confluent-kafka consumer configured like the worker's restore
  consumer reads the whole changelog and does nothing with it
  (:func:`benchmarks.baselines.consume`), timed from ``assign`` to the end of every
  partition;
* a worker starts over an empty state dir and restores every task, timed from the first
  ``restore.start`` log line to the last ``restore.done``; the record count is
  ``worker_restored_records_total`` and must equal what was seeded.

Target (issue 8): at least 70% of the ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks import plots, profiling
from benchmarks.baselines import consume
from benchmarks.harness import (
    BenchmarkFailed,
    RunContext,
    client_settings,
    new_application_id,
    readyz_tasks,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import produce
from benchmarks.log_events import log_time
from benchmarks.measure import steady_rate
from benchmarks.results import PlotPath, Result, Row, Target, interleaved, table
from benchmarks.sampling import Sampler
from benchmarks.workload import (
    EXAMPLE_PARTITIONS,
    accounts,
    create_totals_changelog,
    totals_records,
)
from worker.dev import sample_data
from worker.dev.processes import WorkerProcess
from worker.events import RESTORE_DONE, RESTORE_START

NAME = "restore"
TITLE = "Restore"


@dataclass(frozen=True)
class Params:
    accounts: int
    versions: int
    runs: int = 2  # worker restores; the raw read runs before each and once more at the end


FULL = Params(accounts=500_000, versions=4)
QUICK = Params(accounts=20_000, versions=2, runs=1)


@dataclass(frozen=True)
class Restored:
    records: int
    seconds: float  # first restore.start to last restore.done
    per_task: dict[str, tuple[int, float]]  # task -> (records, seconds) from restore.done
    samples: list[tuple[float, float]]

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def _steady(samples: list[tuple[float, float]], total: int) -> str:
    """The steady rate as text; a restore over within one sampling interval (quick mode's
    tiny changelog) has none."""
    try:
        return f"{steady_rate(samples, total):,.0f}/s"
    except ValueError:
        return "n/a (over between two samples)"


def _whole_rate(samples: list[tuple[float, float]]) -> float:
    """Records / seconds from ``assign`` to the end of the last partition."""
    return samples[-1][1] / (samples[-1][0] - samples[0][0])


@dataclass(frozen=True)
class Profile:
    """A profiled restore (a run of its own) and where its time went."""

    rate: float  # records/s of the profiled restore
    summary: profiling.Summary
    shares: dict[str, float]  # category label -> share of the busy samples


@dataclass(frozen=True)
class Measured:
    """What the raw reads and the worker restores observed."""

    params: Params
    seeded: int  # changelog records every side read
    ceilings: list[list[tuple[float, float]]]  # per raw read: (time, records read)
    restores: list[Restored]
    profile: Profile | None  # with profiling on

    @property
    def ceiling_rates(self) -> list[float]:
        return [_whole_rate(s) for s in self.ceilings]


def measure(ctx: RunContext, params: Params) -> Measured:
    """Raw reads and worker restores alternate on one broker, so outside load that comes
    and goes hits both; the report compares the best run of each (the least disturbed one)."""
    broker = start_broker(ctx)
    bootstrap = broker.bootstrap
    app_id = new_application_id("bench-restore")
    sample_data.create_example_topics(client_settings(bootstrap), EXAMPLE_PARTITIONS)  # no profiles
    changelog = create_totals_changelog(bootstrap, app_id)
    seeded = produce(
        bootstrap, changelog, totals_records(accounts(params.accounts), params.versions)
    )
    settings = worker_settings(bootstrap, app_id, {"num.standby.replicas": 0})

    ceilings: list[list[tuple[float, float]]] = []
    restores: list[Restored] = []
    for i in range(params.runs):
        ceilings.append(consume(bootstrap, changelog))
        restores.append(_restore_once(ctx, f"worker-{i + 1}", settings, seeded))
    ceilings.append(consume(bootstrap, changelog))
    for samples in ceilings:
        if samples[-1][1] != seeded:
            raise BenchmarkFailed(f"the raw consumer read {samples[-1][1]} of {seeded} records")
    profile = None
    if ctx.profile:
        sources = profiling.snapshot_sources()
        profiled = _restore_once(ctx, "profiled-worker", settings, seeded, profile=True)
        raw = ctx.path("profiles", "restore.txt")
        profile = Profile(
            profiled.rate,
            profiling.summarise(raw, "ChangelogReader.step", sources),
            dict(profiling.breakdown(raw, "Worker._run_loop", CATEGORIES, sources, LOOP)),
        )
    return Measured(params, seeded, ceilings, restores, profile)


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """The row against the best raw read, the runs, the plot; with a profile, its table
    and, if the target is missed, why."""
    params, seeded, ceilings = measured.params, measured.seeded, measured.ceilings
    restores = measured.restores
    result = Result(NAME, TITLE)
    rates = measured.ceiling_rates
    best = max(range(len(rates)), key=rates.__getitem__)
    restored = max(restores, key=lambda r: r.rate)

    result.rows.append(
        Row(
            metric="restore, records/s",
            measured=restored.rate,
            measured_label="worker, empty state dir",
            baseline=rates[best],
            baseline_label="raw consume",
            unit="records/s",
            target=Target(">=", 0.70, "issue 8"),
        )
    )
    result.facts = {
        "seeded": seeded,
        "accounts": params.accounts,
        "versions": params.versions,
        "partitions": EXAMPLE_PARTITIONS,
    }
    raw_reads = [
        [f"raw read {i + 1}", f"{samples[-1][0] - samples[0][0]:.2f}", f"{rate:,.0f}"]
        for i, (samples, rate) in enumerate(zip(ceilings, rates, strict=True))
    ]
    worker = [
        [f"worker restore {i + 1}", f"{r.seconds:.2f}", f"{r.rate:,.0f}"]
        for i, r in enumerate(restores)
    ]
    tasks = [[t, f"{n:,}", f"{sec:.2f}"] for t, (n, sec) in sorted(restored.per_task.items())]
    steady = [[_steady(restored.samples, seeded), _steady(ceilings[best], seeded)]]
    result.details += [
        table(["run, in order", "seconds", "records/s"], interleaved(raw_reads, worker)),
        table(["task, in the best restore", "records", "seconds"], tasks),
        table(["steady rate: worker restore", "raw consumer"], steady, left=0),
    ]
    result.plots.append(
        plots.progress(
            plot_path(NAME),
            "Restore: changelog records read over time (best run of each)",
            {
                f"worker restore ({restored.rate:,.0f}/s)": restored.samples,
                f"raw consume ({rates[best]:,.0f}/s)": ceilings[best],
            },
            total=seeded,
        )
    )
    profile = measured.profile
    if profile is not None:
        title = (
            f"Profile of the restore (a second run with py-spy attached, "
            f"{profile.rate:,.0f} records/s)"
        )
        result.details.append(profiling.markdown(profile.summary, title))
        result.plots.append(plots.profile(plot_path(f"{NAME}-profile"), {title: profile.summary}))
        if result.rows[0].met is False:
            result.details.append(_gap(restored.rate, rates[best], profile.shares))
    return result


# Where the processing thread's time goes during a restore, by kind of work (the first
# that claims a sample wins).
FETCHING = "fetching records (librdkafka `consume`; the raw read pays it too)"
WRITES = "RocksDB batch writes (memtable inserts and the WAL, in RocksDB's C++)"
BATCHES = "building the batches (`topic()`, `partition()`, `key()`, `value()`, `put()` per record)"
FINISH = "finishing (flushing memtables in the background, starting the restored tasks)"
LOOP = "everything else (the loop: group poll, metrics; opening the stores)"
CATEGORIES = [
    profiling.Category(
        FINISH, under=("ChangelogReader._finish_completed", "Tasks._start_processing")
    ),
    profiling.Category(FETCHING, leaf_functions=("RestoreConsumer.fetch",)),
    profiling.Category(WRITES, leaf_functions=("Store.write_restored", "Store._put_offsets")),
    profiling.Category(BATCHES, under=("ChangelogReader._apply",)),
]


def _gap(rate: float, raw_rate: float, shares: dict[str, float]) -> str:
    """Why the target is missed, in numbers: the time per record, where the profiled run
    spent it, and what the target leaves for everything beyond fetching."""
    target = 0.70
    per_record, raw_per_record = 1e6 / rate, 1e6 / raw_rate
    allowed = raw_per_record / target
    listed = "; ".join(f"{label} {share:.0%}" for label, share in shares.items())
    return (
        f"**Why the target is missed.** The worker restores a record in {per_record:.2f} us, "
        f"the raw read reads one in {raw_per_record:.2f} us; {target:.0%} of the raw rate "
        f"allows {allowed:.2f} us, {allowed - raw_per_record:.2f} us beyond fetching. Where the "
        f"processing thread's busy time went in the profiled restore: {listed}. Applied to "
        f"the measured run, RocksDB's writes alone take {shares[WRITES] * per_record:.2f} us "
        f"per record and building the batches {shares[BATCHES] * per_record:.2f} us. The "
        f"batches are built straight from the fetched messages (a few C calls per record, no "
        f"Python objects of our own); the writes go through the WAL so that a kill -9 during "
        f"a restore loses at most the batch being written "
        f"(`tests/faults/test_kill_during_restore.py`). Writing restored batches with the "
        f"WAL off would save the WAL's part of the write and lose, on a kill -9, every batch "
        f"since the last memtable flush."
    )


def _restore_once(
    ctx: RunContext, name: str, settings: dict[str, object], expected: int, profile: bool = False
) -> Restored:
    """A worker over an empty state dir: wait until every task restored, then stop it."""
    worker = start_worker(ctx, name, settings)
    spy = profiling.attach(ctx, worker, "restore") if profile else None
    restored = lambda: worker.metric("worker_restored_records_total")  # noqa: E731
    with Sampler(restored, 0.1) as sampler:
        # Ready with every task active: on Apache Kafka a joining member's first round can
        # assign nothing (the leader had no metadata of the topics yet), and /readyz is
        # then 200 for the moment until the next round gives it the tasks.
        wait_for(
            lambda: worker.ready() and _actives(worker) == EXAMPLE_TASKS,
            max(120.0, expected / 5000), f"{name} to restore every task", 0.1, [worker],
        )  # fmt: skip
    counted = int(restored())
    if spy is not None:
        spy.stop()
    stop_worker(worker)
    samples = [s for s in sampler.samples if s[1] > 0] or sampler.samples
    if counted != expected:
        raise BenchmarkFailed(
            f"{name}: worker_restored_records_total is {counted}, {expected} were seeded"
        )
    return _from_logs(worker, expected, samples)


# The example app's scoring tasks and its joins' (which hold nothing to restore here).
EXAMPLE_TASKS = 2 * EXAMPLE_PARTITIONS


def _actives(worker: WorkerProcess) -> int:
    return sum(1 for task in readyz_tasks(worker) if task.get("kind") == "active")


def _from_logs(
    worker: WorkerProcess, expected: int, samples: list[tuple[float, float]]
) -> Restored:
    """Records and duration from the ``restore.start`` and ``restore.done`` log lines."""
    events = worker.log_events()
    starts = [log_time(e) for e in events if e.get("event") == RESTORE_START]
    dones: list[dict[str, Any]] = [e for e in events if e.get("event") == RESTORE_DONE]
    if not starts or len(dones) != EXAMPLE_TASKS:
        raise BenchmarkFailed(
            f"{worker.name}: {len(starts)} restore.start and {len(dones)} restore.done lines"
        )
    records = int(sum(int(e["records"]) for e in dones))
    if records != expected:
        raise BenchmarkFailed(f"{worker.name} restored {records} records, {expected} were seeded")
    seconds = max(log_time(e) for e in dones) - min(starts)
    per_task = {str(e["task_id"]): (int(e["records"]), float(e["seconds"])) for e in dones}
    return Restored(records, seconds, per_task, samples)
