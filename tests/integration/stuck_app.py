"""A topology whose processor hangs on a record with value ``"hang"``: a stop that cannot finish.

Run with ``worker start --app tests.integration.stuck_app:build`` and the input topic in
``STUCK_APP_TOPIC``. Before hanging the processor prints ``stuck-app: hanging`` to stderr,
so a test knows the processing loop is stuck and a SIGTERM can no longer stop it cleanly.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from worker.processing import ProcessorContext, Topology
from worker.serde import STR

HANG = "hang"
MARKER = "stuck-app: hanging"
TOPIC_ENV = "STUCK_APP_TOPIC"


def _maybe_hang(ctx: ProcessorContext, key: Any, value: Any) -> None:
    if value == HANG:
        print(MARKER, file=sys.stderr, flush=True)
        threading.Event().wait()  # forever: only the watchdog or a second signal ends this


def build() -> Topology:
    topic = os.environ[TOPIC_ENV]
    return (
        Topology()
        .add_source("in", topic, key_serde=STR, value_serde=STR)
        .add_processor("maybe-hang", _maybe_hang, parents=["in"])
    )
