"""The Kafka Streams comparison's report, from made-up measurements: no broker, no JVM."""

from __future__ import annotations

import string
from pathlib import Path

import pytest

from benchmarks import kafka_streams, report
from benchmarks.__main__ import runs
from benchmarks.kafka_streams_runs import Run, by_kind


def linear(rate: float, total: int, start: float = 0.0) -> list[tuple[float, float]]:
    """A counter growing at ``rate`` a second to ``total``, sampled every 0.1 s."""
    steps = int(10 * total / rate) + 2
    return [(start + i / 10, min(total, rate * i / 10)) for i in range(steps)]


def run(rate: float, cpu_per_record_us: float, total: int) -> Run:
    processed = linear(rate, total)
    cpu = [(t, n * cpu_per_record_us / 1e6) for t, n in processed]
    threads = {"Python threads (processing loop, HTTP server)": 3.0, "librdkafka threads": 1.0}
    return Run(processed, cpu, seconds=total / rate + 3, threads=threads)


def test_cpu_per_record_is_the_cpu_time_over_the_rate_window_per_record() -> None:
    assert run(10_000, 12.5, 50_000).cpu_per_record_us(50_000) == pytest.approx(12.5, rel=0.01)


def test_the_report_compares_each_topology_and_guarantee_ours_against_kafka_streams(
    tmp_path: Path,
) -> None:
    params = kafka_streams.Params(records=50_000, keys=100, rounds=2)
    pairs = [
        kafka_streams.Pair(
            topology, guarantee, i == 0, run(20_000 + i, 10, 50_000), run(10_000, 40, 50_000)
        )
        for topology in kafka_streams.TOPOLOGIES
        for guarantee in kafka_streams.GUARANTEES
        for i in range(2)
    ]
    result = kafka_streams.report(
        kafka_streams.Measured(
            params, pairs, {"count_sum": kafka_streams.Cached(run(40_000, 5, 50_000), 12_000)}, {}
        ),
        lambda name: tmp_path / f"{name}.png",
    )

    cached = [r for r in result.rows if r.metric.endswith("record cache on")]
    assert [(r.ratio, r.baseline_label) for r in cached] == [
        (pytest.approx(0.5, rel=0.01), "Kafka Streams, 10 MiB cache: 12,000 outputs")
    ]
    rates = [r for r in result.rows if r.metric.startswith("records/s") and r not in cached]
    cpus = [r for r in result.rows if r.metric.startswith("CPU per record")]
    assert len(rates) == len(cpus) == 4
    assert all(r.ratio == pytest.approx(2.0, rel=0.01) for r in rates)  # the best run of each
    assert all(r.ratio == pytest.approx(0.25, rel=0.02) for r in cpus)
    asked = {f for _, f, _, _ in string.Formatter().parse(report.sections()["kafka_streams"]) if f}
    assert asked <= set(result.facts)
    assert (tmp_path / "kafka_streams.png").stat().st_size > 0


def test_kafka_streams_runs_on_kafka_whatever_the_broker_option() -> None:
    assert runs(["kafka_streams"], ["embedded"]) == [("kafka_streams", "kafka")]


def test_threads_are_grouped_by_kind_from_their_names() -> None:
    assert by_kind(
        {
            "C2 CompilerThre": 2.0,
            "C1 CompilerThre": 1.0,
            "streams-count_s": 5.0,
            "rdk:broker1": 0.5,
            "python": 4.0,
            "java": 0.1,
            "Signal Dispatch": 0.2,
        }
    ) == {
        "JIT compiler": 3.0,
        "Kafka Streams' stream thread": 5.0,
        "librdkafka threads": 0.5,
        "Python threads (processing loop, HTTP server)": 4.0,
        "the JVM's main thread (start-up, class loading)": 0.1,
        "other threads": 0.2,
    }
