"""``python -m benchmarks --broker`` and ``--update``, from made-up texts: no broker."""

from __future__ import annotations

import pytest

from benchmarks import report_merge
from benchmarks.__main__ import parse_args, runs


def test_each_benchmark_runs_on_each_broker_named_in_turn() -> None:
    args = parse_args(["--broker", "embedded,kafka", "restore", "memory"])
    assert runs(args.names, args.broker) == [
        ("restore", "embedded"),
        ("restore", "kafka"),
        ("memory", "embedded"),
        ("memory", "kafka"),
    ]
    assert parse_args([]).broker == ["embedded"]


def test_every_benchmark_but_kafka_streams_runs_on_the_brokers_asked_for() -> None:
    """A module's own names (processes.py has a BROKER column) never pick its broker."""
    from benchmarks.__main__ import BENCHMARKS

    planned = runs(sorted(BENCHMARKS), ["embedded"])
    assert {broker for name, broker in planned if name != "kafka_streams"} == {"embedded"}
    assert ("kafka_streams", "kafka") in planned


def test_an_unknown_broker_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--broker", "redpanda"])


OLD = """# Benchmarks

Measured 2026-11-25 17:13 UTC by `python -m benchmarks`, in 30.9 minutes.

## Summary

| benchmark | measured | baseline | ratio | target | met |
|---|---|---|---:|---|---|
| [Restore](#restore): restore, records/s | 1 | 2 | 0.50 | | |
| [Memory](#memory): peak RSS | 3 | 4 | 0.75 | | |

## Machine and versions

| CPU | old |

## Restore

old restore figures

## Memory

old memory figures

## How to run

old how
"""

NEW = """# Benchmarks

Measured 2026-11-27 22:00 UTC by `python -m benchmarks --update`, in 9.0 minutes.

## Summary

| benchmark | measured | baseline | ratio | target | met |
|---|---|---|---:|---|---|
| [Restore](#restore): restore, records/s | 5 | 6 | 0.83 | | |
| [Restore (Apache Kafka 4.1.1)](#restore-apache-kafka-411): restore, records/s | 7 | 8 | 0.88 | | |

## Machine and versions

| CPU | new |

## Restore

new restore figures

## Restore (Apache Kafka 4.1.1)

kafka restore figures

## How to run

new how
"""


def test_update_replaces_the_sections_run_and_keeps_the_others_with_their_date() -> None:
    merged = report_merge.merge(NEW, OLD)

    assert merged.startswith("# Benchmarks\n\nMeasured 2026-11-27 22:00 UTC")
    headings = [line for line in merged.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Summary",
        "## Machine and versions",
        "## Restore",
        "## Restore (Apache Kafka 4.1.1)",
        "## Memory",
        "## How to run",
    ]
    rows = [line for line in merged.splitlines() if line.startswith("| [")]
    assert [r.split("|")[2].strip() for r in rows] == ["5", "7", "3"]
    assert "old restore figures" not in merged and "| CPU | new |" in merged
    memory = merged.split("## Memory", 1)[1]
    assert "kept from the run of 2026-11-25 17:13 UTC" in memory
    assert "old memory figures" in memory and "new how" in merged and "old how" not in merged


def test_a_section_kept_twice_keeps_the_date_of_the_run_that_measured_it() -> None:
    once = report_merge.merge(NEW, OLD)
    again = report_merge.merge(NEW.replace("2026-11-27 22:00", "2026-11-28 09:00"), once)
    assert again.count("kept from the run of") == 1
    assert "kept from the run of 2026-11-25 17:13 UTC" in again
