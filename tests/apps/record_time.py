"""A topology that shows record time: each input is kept in a store and copied to the
output with the task's stream time appended to its value.

Run with ``worker start --app tests.apps.record_time:build`` and the topics in
``TIME_APP_INPUT`` and ``TIME_APP_OUTPUT``; ``timestamp.extractor =
tests.apps.record_time:from_header`` takes the time from a ``ts`` header instead. Output value: ``"<input value>|<stream time>"``;
the output keeps the input's timestamp and headers (``forward`` inherits them), and the
store's changelog (``<application.id>-last-changelog``) records carry the same timestamp.
"""

from __future__ import annotations

import os
from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.serde import STR

INPUT_ENV = "TIME_APP_INPUT"
OUTPUT_ENV = "TIME_APP_OUTPUT"
STORE = "last"


def _copy(ctx: ProcessorContext, key: Any, value: Any) -> None:
    ctx.store(STORE).put(key, value)
    ctx.forward(key, f"{value}|{ctx.stream_time}")


def from_header(record: Any, stream_time_ms: int) -> int:
    """The ``ts`` header's integer (which may be negative: an invalid timestamp), or the
    record's own timestamp when it has none."""
    for name, value in record.headers() or ():
        if name == "ts":
            return int(value)
    return int(record.timestamp()[1])


def build() -> Topology:
    return (
        Topology()
        .add_source("in", os.environ[INPUT_ENV], key_serde=STR, value_serde=STR)
        .add_store(STORE, key_serde=STR, value_serde=STR)
        .add_processor("copy", _copy, parents=["in"], stores=[STORE])
        .add_sink("out", os.environ[OUTPUT_ENV], parents=["copy"], key_serde=STR, value_serde=STR)
    )


def build_stateless() -> Topology:
    """The same copy without a store: a task with no changelog of its own, whose stream
    time only the committed offsets' metadata carries to a new owner."""
    return (
        Topology()
        .add_source("in", os.environ[INPUT_ENV], key_serde=STR, value_serde=STR)
        .add_processor("copy", _forward, parents=["in"])
        .add_sink("out", os.environ[OUTPUT_ENV], parents=["copy"], key_serde=STR, value_serde=STR)
    )


def _forward(ctx: ProcessorContext, key: Any, value: Any) -> None:
    ctx.forward(key, f"{value}|{ctx.stream_time}")
