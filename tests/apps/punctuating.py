"""A topology with a stream-time and a wall-clock punctuator, for the punctuator tests.

Run with ``worker start --app tests.apps.punctuating:build`` and the topics in the
environment (``PUNCTUATING_INPUT``, ``PUNCTUATING_OUTPUT``). The processor ``track``
counts its records; its ``init`` schedules:

- ``on_stream`` every ``INTERVAL_MS`` of stream time: forwards ``{"now": now_ms,
  "stream_time": ...}`` to the output. If ``PUNCTUATING_CRASH_AT`` names a boundary
  index (``now_ms // INTERVAL_MS``) and the file ``PUNCTUATING_CRASH_MARKER`` does not
  exist yet, it creates the file and SIGKILLs its own process right after forwarding:
  a crash between a punctuation and its commit, once.
- ``on_wall`` every ``WALL_MS`` of wall-clock time: counts its runs in the store.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR

INPUT_ENV = "PUNCTUATING_INPUT"
OUTPUT_ENV = "PUNCTUATING_OUTPUT"
CRASH_AT_ENV = "PUNCTUATING_CRASH_AT"
CRASH_MARKER_ENV = "PUNCTUATING_CRASH_MARKER"
INTERVAL_MS = 1000
WALL_MS = 200
STORE = "seen"


def track(ctx: ProcessorContext, key: str, value: Any) -> None:
    seen = ctx.store(STORE)
    seen.put(key, (seen.get(key) or 0) + 1)


def init(ctx: ProcessorContext) -> None:
    ctx.schedule(INTERVAL_MS, "stream", on_stream)
    ctx.schedule(WALL_MS, "wall", on_wall)


def on_stream(ctx: ProcessorContext, now_ms: int) -> None:
    ctx.forward("stream", {"now": now_ms, "stream_time": ctx.stream_time})
    crash_at, marker = os.environ.get(CRASH_AT_ENV), os.environ.get(CRASH_MARKER_ENV)
    due = bool(crash_at) and now_ms // INTERVAL_MS == int(crash_at or 0)
    if due and marker and not Path(marker).exists():
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)  # before the commit of this punctuation


def on_wall(ctx: ProcessorContext, now_ms: int) -> None:
    seen = ctx.store(STORE)
    seen.put("__wall_runs", (seen.get("__wall_runs") or 0) + 1)


def build() -> Topology:
    return (
        Topology()
        .add_source("in", os.environ[INPUT_ENV], key_serde=STR, value_serde=JSON)
        .add_store(STORE, key_serde=STR, value_serde=JSON)
        .add_processor("track", track, parents=["in"], stores=[STORE], init=init)
        .add_sink("out", os.environ[OUTPUT_ENV], parents=["track"], key_serde=STR, value_serde=JSON)
    )
