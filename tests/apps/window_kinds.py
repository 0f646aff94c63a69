"""One emit-final aggregation of each window kind over one input: the app of the window
kinds integration tests (tests/integration/test_window_kinds.py).

Each aggregation is named after its kind (its store, its processor label in
``worker_late_records_total``) and collects the sorted event times of its window's records
(the input's values are ``{"ts": <its record timestamp>}``), so an output shows which
records a window holds, a record counted twice included. Its final results go to the
topic ``<WINDOW_KINDS_OUTPUT>-<kind>``; the input topic is ``WINDOW_KINDS_INPUT``.

If ``WINDOW_KINDS_CRASH_KIND`` names a kind and the file ``WINDOW_KINDS_CRASH_MARKER`` does
not exist yet, the processor after that kind's aggregation creates the file and SIGKILLs
its own process when it passes a final result of a window starting at or after
``WINDOW_KINDS_CRASH_AT``: a crash between an emission and its commit, once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.processing.windows import Windows, hopping, session, sliding, tumbling
from worker.serde import JSON, STR
from worker.windowed_serde import Windowed, WindowedSerde

INPUT_ENV = "WINDOW_KINDS_INPUT"
OUTPUT_ENV = "WINDOW_KINDS_OUTPUT"
CRASH_KIND_ENV = "WINDOW_KINDS_CRASH_KIND"
CRASH_AT_ENV = "WINDOW_KINDS_CRASH_AT"
CRASH_MARKER_ENV = "WINDOW_KINDS_CRASH_MARKER"
GRACE_MS = 2_000
KINDS: dict[str, Windows] = {
    "tumbling": tumbling(10_000, grace_ms=GRACE_MS),
    "hopping": hopping(10_000, 5_000, grace_ms=GRACE_MS),
    "sliding": sliding(5_000, grace_ms=GRACE_MS),
    "session": session(3_000, grace_ms=GRACE_MS),
}


def output_topic(prefix: str, kind: str) -> str:
    return f"{prefix}-{kind}"


def _crash_once(kind: str) -> Callable[[ProcessorContext, Windowed[str], Any], None]:
    def forward(ctx: ProcessorContext, window: Windowed[str], times: Any) -> None:
        ctx.forward(window, times)
        crash_at, marker = os.environ.get(CRASH_AT_ENV), os.environ.get(CRASH_MARKER_ENV)
        if os.environ.get(CRASH_KIND_ENV) != kind or not crash_at or not marker:
            return
        if window.start_ms >= int(crash_at) and not Path(marker).exists():
            Path(marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)  # before the commit of this emission

    return forward


def _add(key: str, value: dict[str, int], times: list[int]) -> list[int]:
    return sorted([*times, value["ts"]])


def _merge(key: str, first: list[int], second: list[int]) -> list[int]:
    return sorted(first + second)


def build() -> Topology:
    topology = Topology().add_source("in", os.environ[INPUT_ENV], STR, JSON)
    for kind, windows in KINDS.items():
        topology.add_windowed_aggregation(
            kind,
            ["in"],
            windows,
            initializer=list,
            aggregator=_add,
            merger=_merge if kind == "session" else None,
            emit="final",
            key_serde=STR,
            value_serde=JSON,
        )
        topology.add_processor(f"{kind}-out", _crash_once(kind), [kind])
        topic = output_topic(os.environ[OUTPUT_ENV], kind)
        topology.add_sink(f"{kind}-sink", topic, [f"{kind}-out"], WindowedSerde(STR), JSON)
    return topology
