"""SIGTERM, SIGINT, a second signal and SIGHUP against real worker processes.

A clean stop commits, writes every task's ``.checkpoint``, leaves the group and exits 0
within ``shutdown.timeout.ms``; the next start over the same state restores nothing and
reprocesses nothing. A stop that cannot finish is cut off by the timeout (exit 1); a
second signal exits at once.
"""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.example_app import TASKS, example_data
from tests.integration.stuck_app import HANG, MARKER, TOPIC_ENV
from tests.support.waiting import wait_until
from worker.config import load
from worker.dev.processes import WorkerProcess
from worker.events import MEMBERSHIP_CLOSED, WORKER_SHUTDOWN_TIMEOUT, WORKER_STOPPED
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.consumers import fetch_high_watermarks
from worker.kafka.loader import produce_records
from worker.runtime.global_tables import GLOBAL_DIR
from worker.serde import STR
from worker.state.checkpoint import read_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]

SHUTDOWN_TIMEOUT_MS = 15000
REPO = Path(__file__).resolve().parents[2]


def task_dirs(worker: WorkerProcess, application_id: str) -> list[str]:
    app_dir = worker.state_dir / application_id
    return sorted(p.name for p in app_dir.iterdir() if p.is_dir())


class QueryHammer:
    """Interactive queries in a loop on another thread, recording every status code."""

    def __init__(self, worker: WorkerProcess, keys: list[str]) -> None:
        self._worker = worker
        self._keys = keys
        self.codes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> QueryHammer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key in self._keys:
                connection = http.client.HTTPConnection("127.0.0.1", self._worker.http_port, 2)
                try:
                    connection.request("GET", f"/stores/account-totals/keys/{key}")
                    self.codes.append(connection.getresponse().status)
                except OSError:
                    if not self._worker.alive:
                        return
                finally:
                    connection.close()


@pytest.mark.duration(18)
def test_sigterm_commits_writes_checkpoints_leaves_and_the_next_start_restores_nothing(
    own_broker, worker_factory
):
    data = example_data(own_broker.bootstrap, accounts=80)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        # Nothing commits or checkpoints on its own during the test: what the restart
        # finds was written by the SIGTERM path.
        "commit.interval.ms": 600000,
        "statestore.checkpoint.interval.ms": 600000,
        "shutdown.timeout.ms": SHUTDOWN_TIMEOUT_MS,
    }
    worker = worker_factory("solo", settings=settings)
    worker.wait_ready(90)
    data.produce(3000)
    wait_until(
        lambda: worker.metric("worker_processed_records_total") >= 3000,
        60,
        message="payments processed",
    )
    assert worker.metric("worker_commits_total") == 0  # all of it uncommitted so far

    os.kill(worker.pid, signal.SIGHUP)  # harmless
    time.sleep(1.0)
    assert worker.alive and worker.ready()

    with QueryHammer(worker, [a.id for a in data.accounts[:10]]) as hammer:
        started = time.monotonic()
        code = worker.terminate(timeout=SHUTDOWN_TIMEOUT_MS / 1000 + 10)
        took = time.monotonic() - started
    assert code == 0
    assert took < SHUTDOWN_TIMEOUT_MS / 1000
    assert hammer.codes, "queries were answered while the worker ran"
    # 404 until the stop's commit (queries see committed data only), 200 after it, 503
    # once the stores close: never an error.
    assert set(hammer.codes) <= {200, 404, 503}

    events = worker.log_events()
    stopped = [e for e in events if e.get("event") == WORKER_STOPPED]
    assert stopped and stopped[-1]["clean"] is True
    assert any(e.get("event") == MEMBERSHIP_CLOSED and e.get("left") for e in events)

    application_id = worker_factory.application_id
    # Every task's directory, and the global table's (worker/runtime/global_tables.py).
    assert task_dirs(worker, application_id) == sorted([*TASKS, GLOBAL_DIR])
    checkpointed: dict[tuple[str, int], int] = {}
    for task in TASKS:
        offsets = read_checkpoint(worker.state_dir / application_id / task / ".checkpoint")
        assert offsets, f"{task} has a .checkpoint with its stores' offsets"
        checkpointed.update(offsets)
    ends = fetch_high_watermarks(data.settings, list(checkpointed), timeout=10)
    assert {tp: off + 1 for tp, off in checkpointed.items()} == ends  # at each changelog's end

    worker.start()  # same state dir, same port
    worker.wait_ready(90)
    assert worker.metric("worker_restored_records_total") == 0
    expected_totals, _ = data.reference()
    wait_until(
        lambda: data.totals_from_changelog(application_id) == expected_totals,
        30,
        message="the changelog holds exactly the reference totals: nothing reprocessed",
    )
    assert worker.terminate() == 0


@pytest.fixture
def stuck_topic(bootstrap: str) -> str:
    topic = f"stuck-{uuid.uuid4().hex[:8]}"
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    Admin(settings).create_topics([TopicSpec(topic, 1)])
    return topic


def start_stuck(worker_factory, bootstrap: str, topic: str, timeout_ms: int) -> WorkerProcess:
    """A worker whose processing loop hangs for good on the record just produced."""
    worker = worker_factory(
        "stuck",
        settings={"shutdown.timeout.ms": timeout_ms},
        args=["--app", "tests.integration.stuck_app:build"],
        env={TOPIC_ENV: topic, "PYTHONPATH": str(REPO)},  # so --app can import tests.*
    )
    worker.wait_ready(60)
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    produce_records(settings, topic, [("k", HANG)], STR, STR)
    wait_until(lambda: MARKER in worker.logs(), 30, message="the processor hangs")
    return worker


def test_a_stop_that_cannot_finish_is_cut_off_by_the_shutdown_timeout(
    bootstrap, worker_factory, stuck_topic
):
    worker = start_stuck(worker_factory, bootstrap, stuck_topic, timeout_ms=2000)
    started = time.monotonic()
    os.kill(worker.pid, signal.SIGTERM)
    code = worker.wait_exit(timeout=20)
    took = time.monotonic() - started
    assert code == 1
    assert 1.9 <= took < 10
    timeouts = [e for e in worker.log_events() if e.get("event") == WORKER_SHUTDOWN_TIMEOUT]
    assert timeouts and timeouts[0]["timeout_ms"] == 2000


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_exits_at_once(bootstrap, worker_factory, stuck_topic, signum):
    worker = start_stuck(worker_factory, bootstrap, stuck_topic, timeout_ms=60000)
    os.kill(worker.pid, signum)
    time.sleep(0.5)
    assert worker.alive, "the first signal alone cannot stop a hung loop"
    started = time.monotonic()
    os.kill(worker.pid, signum)
    code = worker.wait_exit(timeout=10)
    assert code == 128 + signum
    assert time.monotonic() - started < 3
