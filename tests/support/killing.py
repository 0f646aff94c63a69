"""The two steps of every crash-loop test: a result table read through the HTTP query
API, and a worker SIGKILLed at a random moment while it processes, then started again
over its state directory."""

from __future__ import annotations

import json
import random
import time
from typing import Any

from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

UNAVAILABLE = "unavailable"


def stored(worker: WorkerProcess, store: str, key: str) -> Any:
    """``key``'s value in ``store`` as the worker answers it: None when it has none,
    ``(UNAVAILABLE, status)`` when it cannot answer now (starting, rebalancing)."""
    status, body = worker.get(f"/stores/{store}/keys/{key}")
    if status == 404:
        return None
    return json.loads(body)["value"] if status == 200 else (UNAVAILABLE, status)


def kill_mid_processing(worker: WorkerProcess, rng: random.Random, label: str) -> None:
    """Wait until ``worker`` processes, SIGKILL it a random moment later, start it again
    and wait until it is ready."""
    wait_until(
        lambda: worker.metric("worker_processed_records_total") > 0,
        60,
        message=f"{label}: processing",
    )
    time.sleep(rng.uniform(0.05, 0.6))  # a random moment mid-processing
    assert worker.kill() == -9, label
    worker.start()
    worker.wait_ready(120)
