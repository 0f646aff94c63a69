"""Counts per key in 10-second hopping windows (advance 5 s, grace 2 s), emitted final: the
app of the windowed aggregation integration tests. Its input's record timestamps are the
event times.

Topics from the environment (``WINDOWED_COUNTS_INPUT``, ``WINDOWED_COUNTS_OUTPUT``). If
``WINDOWED_COUNTS_CRASH_AT`` names a window start and the file
``WINDOWED_COUNTS_CRASH_MARKER`` does not exist yet, the processor after the aggregation
creates the file and SIGKILLs its own process when that window's final result passes it:
a crash between an emission and its commit, once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.processing.windows import hopping
from worker.serde import JSON, STR
from worker.windowed_serde import Windowed, WindowedSerde

INPUT_ENV = "WINDOWED_COUNTS_INPUT"
OUTPUT_ENV = "WINDOWED_COUNTS_OUTPUT"
CRASH_AT_ENV = "WINDOWED_COUNTS_CRASH_AT"
CRASH_MARKER_ENV = "WINDOWED_COUNTS_CRASH_MARKER"
WINDOWS = hopping(10_000, 5_000, grace_ms=2_000)


def crash_once(ctx: ProcessorContext, window: Windowed[str], count: Any) -> None:
    ctx.forward(window, count)
    crash_at, marker = os.environ.get(CRASH_AT_ENV), os.environ.get(CRASH_MARKER_ENV)
    if crash_at and marker and window.start_ms == int(crash_at) and not Path(marker).exists():
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)  # before the commit of this emission


def build() -> Topology:
    return (
        Topology()
        .add_source("in", os.environ[INPUT_ENV], STR, JSON)
        .add_windowed_aggregation(
            "counts",
            ["in"],
            WINDOWS,
            initializer=lambda: 0,
            aggregator=lambda key, value, n: n + 1,
            emit="final",
            key_serde=STR,
            value_serde=JSON,
        )
        .add_processor("crash-once", crash_once, ["counts"])
        .add_sink("out", os.environ[OUTPUT_ENV], ["crash-once"], WindowedSerde(STR), JSON)
    )
