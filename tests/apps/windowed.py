"""Counts per key per minute in a window store kept two minutes: the app of the windowed
store integration tests (its input's record timestamps are the event times)."""

from __future__ import annotations

import os
from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR

EVENTS_VARIABLE = "WINDOWED_EVENTS_TOPIC"  # one input topic per test on a shared broker
PER_MINUTE = "per-minute"
MINUTE = 60_000
RETENTION_MS = 2 * MINUTE


def count(ctx: ProcessorContext, key: str, value: Any) -> None:
    windows = ctx.window_store(PER_MINUTE)
    start = ctx.timestamp // MINUTE * MINUTE
    windows.put(key, start, (windows.get(key, start) or 0) + 1)


def build() -> Topology:
    return (
        Topology()
        .add_source("events", os.environ.get(EVENTS_VARIABLE, "window-events"), STR, JSON)
        .add_window_store(
            PER_MINUTE,
            MINUTE,
            grace_ms=0,
            retention_ms=RETENTION_MS,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_processor("count", count, ["events"], stores=[PER_MINUTE])
    )
