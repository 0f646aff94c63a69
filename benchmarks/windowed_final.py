"""The windowed count and sum with emit-final: final results per second, and the worker's
memory and RocksDB size against the number of open windows.

Issue 22: "the same with emit-final: final results per second, and the memory and RocksDB
size against the number of open windows". The workload of :mod:`benchmarks.windowed`
(tumbling minutes, 10 s grace, ``records`` records over ``keys`` keys, 4 partitions,
at-least-once, a commit every 5 s) with ``emit="final"``
(:func:`benchmarks.apps.windowed_final_app`), its event times spread over each of
``spans``: the shorter the span, the more records per minute and so the more windows open
at once (each key's minute holds one window). Each span gets its own broker and input.

Per span: the raw consume-and-produce ceiling before the worker; one worker, sampled from
outside: records processed (``worker_processed_records_total``), final results (the
output topic's end offsets), RSS (``/proc``) and the store's bytes on disk. Rates are
slopes between 10% and 90% (of the input, of the final results). Open windows are counted
from the input: each minute's distinct keys, times (size + grace) / size. The output is
read back to check that each window came out once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks import plots
from benchmarks.apps import SUMS_INPUT, WINDOW_GRACE_MS, WINDOWED_OUTPUT
from benchmarks.baselines import consume_and_produce
from benchmarks.count_sum import amount_records
from benchmarks.harness import (
    RunContext,
    new_application_id,
    start_broker,
    stop_worker,
    worker_settings,
)
from benchmarks.kafka_io import create_topics, produce, read_topic
from benchmarks.measure import steady_rate_or_span
from benchmarks.results import PlotPath, Result, Row, table
from benchmarks.windowed_runs import (
    MINUTE_MS,
    Observed,
    event_times,
    observed_run,
    open_windows,
    recent_start,
)
from worker.state.rocksdb_env import MiB

NAME = "windowed_final"
TITLE = "Windowed count and sum: tumbling minutes, emit final"
APP = "benchmarks.apps:windowed_final_app"
PARTITIONS = 4
JITTER_MS = 5_000


@dataclass(frozen=True)
class Params:
    records: int
    keys: int
    spans_minutes: tuple[int, ...]  # one run each; the first is the windowed benchmark's
    commit_interval_ms: int = 5000


FULL = Params(records=1_000_000, keys=200_000, spans_minutes=(60, 10, 3))
QUICK = Params(records=20_000, keys=2_000, spans_minutes=(20, 2), commit_interval_ms=1000)


@dataclass(frozen=True)
class Span:
    minutes: int
    open_windows: float  # mean, from the input
    windows: int  # distinct (key, minute) windows in the input
    ceiling: list[tuple[float, float]]
    run: Observed
    results: int  # final results in the output topic
    distinct_results: int  # distinct windows among them

    def ceiling_rate(self, records: int) -> float:
        return steady_rate_or_span(self.ceiling, records)

    def worker_rate(self, records: int) -> float:
        return steady_rate_or_span(self.run.processed, records)

    def results_rate(self) -> float:
        start = self.run.outputs[0][1] if self.run.outputs else 0.0
        counted = [(t, v - start) for t, v in self.run.outputs]
        return steady_rate_or_span(counted, self.results) if self.results else 0.0


@dataclass(frozen=True)
class Measured:
    params: Params
    spans: list[Span]


def measure(ctx: RunContext, params: Params) -> Measured:
    overrides: dict[str, object] = {
        "commit.interval.ms": params.commit_interval_ms,
        "num.standby.replicas": 0,
    }
    spans = []
    for minutes in params.spans_minutes:
        broker = start_broker(ctx, f"broker-{minutes}")
        bootstrap = broker.bootstrap
        create_topics(
            bootstrap,
            {SUMS_INPUT: PARTITIONS, WINDOWED_OUTPUT: PARTITIONS, "ceiling-out": PARTITIONS},
        )
        span_ms = minutes * MINUTE_MS
        times = list(event_times(params.records, recent_start(span_ms), span_ms, JITTER_MS))
        records = list(amount_records(params.records, params.keys, seed=22))
        produce(bootstrap, SUMS_INPUT, records, timestamps=times)
        keyed = [(key, ts) for (key, _value), ts in zip(records, times, strict=True)]
        ceiling = consume_and_produce(bootstrap, SUMS_INPUT, "ceiling-out")
        settings = worker_settings(bootstrap, new_application_id("bench-final"), overrides)
        worker, run = observed_run(
            ctx, bootstrap, f"worker-{minutes}", settings, APP, params.records, WINDOWED_OUTPUT
        )
        stop_worker(worker)
        results, distinct = _results(bootstrap)
        spans.append(
            Span(
                minutes,
                open_windows(keyed, MINUTE_MS, WINDOW_GRACE_MS),
                len({(key, ts - ts % MINUTE_MS) for key, ts in keyed}),
                ceiling, run, results, distinct,
            )
        )  # fmt: skip
        broker.stop(timeout=3.0)  # the next span's broker gets the machine alone
    return Measured(params, spans)


def _results(bootstrap: str) -> tuple[int, int]:
    """(final results in the output, distinct windows among them)."""
    keys: list[Any] = []
    read_topic(bootstrap, WINDOWED_OUTPUT, lambda msg: keys.append(msg.key()), timeout=600)
    return len(keys), len(set(keys))


def report(measured: Measured, plot_path: PlotPath) -> Result:
    params = measured.params
    records = params.records
    spans = measured.spans
    first = spans[0]
    most = max(spans, key=lambda s: s.open_windows)
    fewest = min(spans, key=lambda s: s.open_windows)
    result = Result(NAME, TITLE)
    result.rows += [
        Row(
            f"records/s, {first.minutes}-minute span",
            first.worker_rate(records),
            f"emit final, {params.keys:,} keys, 1 worker",
            first.ceiling_rate(records),
            "raw consume-and-produce",
            "records/s",
        ),
        Row(
            f"final results/s, {first.minutes}-minute span",
            first.results_rate(),
            "final results written by the worker",
            first.ceiling_rate(records),
            "raw consume-and-produce records",
            "records/s",
        ),
        Row(
            "peak RSS, most open windows against fewest",
            most.run.peak_rss / MiB,
            f"{most.open_windows:,.0f} open windows",
            fewest.run.peak_rss / MiB,
            f"{fewest.open_windows:,.0f} open windows",
            "MiB",
        ),
        Row(
            "RocksDB on disk, most open windows against fewest",
            most.run.max_disk / MiB,
            f"{most.open_windows:,.0f} open windows",
            fewest.run.max_disk / MiB,
            f"{fewest.open_windows:,.0f} open windows",
            "MiB on disk",
        ),
    ]
    rows = []
    for span in spans:
        rows.append(
            [
                f"{span.minutes}",
                f"{span.open_windows:,.0f}",
                f"{span.worker_rate(records):,.0f}",
                f"{span.ceiling_rate(records):,.0f}",
                f"{span.results_rate():,.0f}",
                f"{span.results:,}",
                "yes" if span.results == span.distinct_results else "**no**",
                f"{span.windows:,}",
                f"{span.run.peak_rss / MiB:,.0f}",
                f"{span.run.max_disk / MiB:,.1f}",
                f"{span.run.seconds:.1f}",
            ]
        )
    headers = ["span (min)", "open windows", "records/s", "ceiling records/s"]
    headers += ["final results/s", "final results", "each window once", "windows in the input"]
    headers += ["peak RSS MiB", "RocksDB MiB (max)", "launch to last record (s)"]
    result.details.append(table(headers, rows))
    result.facts = {
        "records": records,
        "keys": params.keys,
        "partitions": PARTITIONS,
        "app": APP,
        "commit_interval_ms": params.commit_interval_ms,
        "spans": ", ".join(str(s.minutes) for s in spans),
        "jitter_ms": JITTER_MS,
    }
    result.plots.append(
        plots.against(
            plot_path(NAME),
            "Emit final: memory and RocksDB against open windows",
            "open windows (mean, from the input)",
            {
                "peak RSS (MiB)": [(s.open_windows, s.run.peak_rss / MiB) for s in spans],
                "RocksDB on disk, max (MiB)": [
                    (s.open_windows, s.run.max_disk / MiB) for s in spans
                ],
            },
            "MiB",
        )
    )
    return result
