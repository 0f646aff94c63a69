"""``worker state list`` and ``worker state wipe`` beside a real worker and broker."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import orjson
import pytest

from tests.integration.example_app import TASKS, example_data
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = pytest.mark.integration


def state_cli(worker: WorkerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``worker state ...`` with the worker's own state dir, application id and broker."""
    command, rest = args[0], args[1:]
    settings = [
        f"--set={key}={worker.settings[key]}" for key in ("application.id", "bootstrap.servers")
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", "state", command,
         "--state-dir", str(worker.state_dir), *settings, *rest],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def listing(worker: WorkerProcess) -> dict[str, Any]:
    result = state_cli(worker, "list", "--json", "--timeout", "10")
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.mark.duration(14)
def test_list_and_wipe_around_a_running_worker(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap, accounts=40)
    settings = {"bootstrap.servers": own_broker.bootstrap, "commit.interval.ms": 200}
    worker = worker_factory("w", settings=settings)
    worker.wait_ready(90)
    data.produce(800)
    wait_until(
        lambda: worker.metric("worker_processed_records_total") >= 800, 60, message="processed"
    )

    running = listing(worker)
    assert running["offsets_from"] == "checkpoint"
    assert running["in_use_by_pid"] == str(worker.pid)
    assert [t["task_id"] for t in running["tasks"]] == TASKS
    refused = state_cli(worker, "wipe", "0_1", "--yes")
    assert refused.returncode == 1
    assert "in use by a live worker" in refused.stderr

    assert worker.terminate() == 0
    stopped = listing(worker)
    assert stopped["offsets_from"] == "store"
    assert stopped["ends_known"] is True
    for task in stopped["tasks"]:
        stores = {s["name"] for s in task["stores"]}
        scoring = {"account-totals", "recent-payments", "busy-10m"}
        assert stores == (scoring if task["task_id"].startswith("0_") else {"account-profiles"})
        assert all(s["bytes"] > 0 for s in task["stores"])
        assert len(task["offsets"]) == len(stores)
        assert task["lag"] == 0  # a clean stop leaves every store at its changelog's end
        for offset in task["offsets"]:
            assert offset["end"] == offset["offset"] + 1
    text = state_cli(worker, "list", "--timeout", "10")
    assert text.returncode == 0
    assert "lag 0" in text.stdout

    wiped = state_cli(worker, "wipe", "0_1", "--yes")
    assert wiped.returncode == 0, wiped.stderr
    others = [t for t in TASKS if t != "0_1"]
    assert [t["task_id"] for t in listing(worker)["tasks"]] == others

    worker.start()
    worker.wait_ready(90)
    assert worker.metric("worker_restored_records_total", task="0_1") > 0
    for task in others:
        assert worker.metric("worker_restored_records_total", task=task) == 0
    assert worker.terminate() == 0
