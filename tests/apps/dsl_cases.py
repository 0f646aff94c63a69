"""DSL topologies that the parity test runs both through the test driver and on a worker
over the broker (tests/integration/test_dsl_parity.py).

``build()`` picks the case named by ``DSL_CASE`` and prefixes every topic it reads or
writes with ``DSL_TOPIC_PREFIX`` (a fresh one per test run on the shared broker). Each
case lists its input topic and its outputs, and a generator of input records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.dsl import StreamsBuilder, tumbling
from worker.serde import STR
from worker.windowed_serde import WindowedSerde

CASE_ENV = "DSL_CASE"
PREFIX_ENV = "DSL_TOPIC_PREFIX"
WINDOWED_KEYS = WindowedSerde(STR)


@dataclass(frozen=True)
class Case:
    build: Callable[[StreamsBuilder, str], None]
    input: str
    outputs: tuple[str, ...]
    records: Callable[[int], list[tuple[str, Any, int]]]  # base ms -> (key, value, ts)
    aggregated: bool  # outputs compared by their last value per key (else as multisets)
    key_serde: Any = STR


def payments(base: int) -> list[tuple[str, Any, int]]:
    return [
        (f"acct-{i % 11}", {"merchant": f"m{i % 5}", "amount": (i * 37) % 200}, base + i * 500)
        for i in range(120)
    ]


def users(base: int) -> list[tuple[str, Any, int]]:
    found: list[tuple[str, Any, int]] = []
    for i in range(90):
        value = None if i % 13 == 12 else {"region": f"r{i % 4}", "score": i % 10}
        found.append((f"user-{i % 9}", value, base + i * 100))
    return found


def per_merchant(b: StreamsBuilder, p: str) -> None:
    counts = b.stream(f"{p}payments").group_by(lambda k, v: v["merchant"], name="by-merchant")
    counts.count(name="merchant-counts").to_stream().to(f"{p}merchant-counts")


def stateless(b: StreamsBuilder, p: str) -> None:
    s = b.stream(f"{p}payments")
    big = s.filter(lambda k, v: v["amount"] >= 100).map_values(lambda v: v["amount"])
    big.flat_map_values(lambda v: [v, -v]).to(f"{p}big")
    s.filter_not(lambda k, v: v["amount"] >= 100).map(lambda k, v: (v["merchant"], k)).to(
        f"{p}small"
    )


def region_scores(b: StreamsBuilder, p: str) -> None:
    table = b.table(f"{p}users", name="users")
    sums = table.group_by(lambda k, v: (v["region"], v["score"]), name="by-region").aggregate(
        lambda: 0,
        lambda key, value, agg: agg + value,
        lambda key, value, agg: agg - value,
        name="region-scores",
    )
    sums.to_stream().to(f"{p}region-scores")


def windowed(b: StreamsBuilder, p: str) -> None:
    counts = (
        b.stream(f"{p}payments")
        .select_key(lambda k, v: v["merchant"])
        .group_by_key(name="windowed-by-merchant")
        .windowed_by(tumbling(10_000, grace_ms=60_000))
        .count(name="merchant-windows")
    )
    counts.to_stream().to(f"{p}merchant-windows", key_serde=WINDOWED_KEYS)


CASES: dict[str, Case] = {
    "per_merchant": Case(per_merchant, "payments", ("merchant-counts",), payments, True),
    "stateless": Case(stateless, "payments", ("big", "small"), payments, False),
    "region_scores": Case(region_scores, "users", ("region-scores",), users, True),
    "windowed": Case(windowed, "payments", ("merchant-windows",), payments, True),
}


def merged_counts(b: StreamsBuilder, p: str) -> None:
    """Two topics merged into one count: one sub-topology reads both, so they must be
    co-partitioned (the start-up tests give them unequal counts)."""
    b.stream(f"{p}left").merge(b.stream(f"{p}right")).group_by_key().count(name="merged")


# Topologies for start-up checks, not run both ways.
STARTUP_CASES: dict[str, Callable[[StreamsBuilder, str], None]] = {"merged": merged_counts}


def builder(case: str, prefix: str) -> StreamsBuilder:
    b = StreamsBuilder()
    (CASES[case].build if case in CASES else STARTUP_CASES[case])(b, prefix)
    return b


def build() -> StreamsBuilder:
    """The case of the environment, for ``worker start --app tests.apps.dsl_cases:build``."""
    return builder(os.environ[CASE_ENV], os.environ[PREFIX_ENV])
