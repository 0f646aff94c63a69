"""The demo's DSL part: the merchants app's output (worker.examples.merchants) read back
and checked against the reference.

The app writes every update of a window's count to ``merchant-counts``; a window's last
record in its partition is its count (each key stays in one partition, in order), which
must equal the reference's count of payments of that merchant in that window.
"""

from __future__ import annotations

import time

from worker.config import Settings
from worker.dev import sample_data
from worker.dev.demo_traffic import Traffic
from worker.examples import merchants
from worker.kafka.loader import read_topic
from worker.serde import JSON

Counts = dict[tuple[str, int], int]


def merchant_counts(settings: Settings) -> Counts:
    """The last count of each (merchant, window start) on ``merchant-counts``."""
    counts: Counts = {}
    for key, value in read_topic(settings, merchants.MERCHANT_COUNTS):
        if key is None or value is None:
            continue
        window = merchants.KEYS.deserialize(key)
        counts[(window.key, window.start_ms)] = JSON.deserialize(value)
    return counts


def expected_counts(traffic: Traffic) -> Counts:
    return merchants.reference((p, traffic.clock.at(n)) for n, (_, p) in enumerate(traffic.stream))


def wait_counted(settings: Settings, traffic: Traffic, timeout: float) -> float | None:
    """Seconds until ``merchant-counts`` holds every window's count (None: not within
    ``timeout``). Reads the topic once a second."""
    want = expected_counts(traffic)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if merchant_counts(settings) == want:
            return time.monotonic() - started
        time.sleep(1.0)
    return None


def check(settings: Settings, expected: sample_data.Reference) -> tuple[list[str], str]:
    """The windows whose count differs from the reference (``merchant@start``), and a
    line of what was found."""
    got = merchant_counts(settings)
    want = expected.merchant_windows
    wrong = sorted(
        f"{m}@{start}"
        for m, start in set(want) | set(got)
        if got.get((m, start)) != want.get((m, start))
    )
    merchants_seen = len({m for m, _ in got})
    text = (
        f"{len(got)} windows of {merchants_seen} merchants, {sum(got.values())} payments "
        f"(reference: {len(want)} windows, {sum(want.values())} payments)"
    )
    return wrong, text
