"""The state directory turns read-only under a running worker (what a full or remounted
disk looks like to RocksDB): a clear error, and no corrupt store on the restart after.

The suite runs as root, which ignores file permissions; the worker is started through
``setpriv`` without the capabilities that let it (as tests/integration/test_startup_errors.py
does with prctl), so the chmod bites.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps import counting
from tests.support.kafka_io import fold, read_partition
from tests.support.processes import WorkerProcess
from tests.support.waiting import wait_until
from worker.config import load
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux setpriv"),
]

PARTITIONS = 2
KEYS = [f"k{i:02d}" for i in range(10)]
APP = "tests.apps.counting:build"
REPO = str(Path(__file__).resolve().parents[2])
NO_FILE_POWERS = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]


class PowerlessWorker(WorkerProcess):
    """A worker that cannot override file permissions, even as root."""

    def command(self) -> list[str]:
        return NO_FILE_POWERS + super().command()


def _chmod_tree(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        os.chmod(path, (mode | stat.S_IWUSR) if writable else (mode & ~bits))


def test_a_read_only_state_dir_stops_the_worker_clearly_and_leaves_no_corrupt_store(
    own_broker, worker_factory
):
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
    for future in admin.create_topics(topics).values():
        future.result(30)
    producer_settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    sent: list[str] = []

    def produce(count: int) -> None:
        keys = [KEYS[(len(sent) + i) % len(KEYS)] for i in range(count)]
        produce_records(
            producer_settings,
            counting.INPUTS,
            [(k, {"id": len(sent) + i}) for i, k in enumerate(keys)],
            STR,
            JSON,
        )
        sent.extend(keys)

    factory_worker = worker_factory(
        "w",
        settings={
            "bootstrap.servers": bootstrap,
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 200,
            "statestore.checkpoint.interval.ms": 0,  # flush and write .checkpoint every commit
            "num.standby.replicas": 0,
        },
        args=["--app", APP],
        env={"PYTHONPATH": REPO},
        start=False,
    )
    worker = PowerlessWorker(
        factory_worker.state_dir,
        factory_worker.http_port,
        factory_worker.settings,
        factory_worker.args,
        factory_worker.log_path,
        factory_worker.env,
        factory_worker.cwd,
        "w",
    )
    worker_factory.workers.append(worker)  # killed at teardown like the others
    worker.start()
    worker.wait_ready(90)
    produce(500)
    worker.wait_for_metric("worker_commits_total", lambda v: v > 0, 30)
    wait_until(lambda: worker.metric("worker_processed_records_total") >= 500, 30)

    app_dir = worker.state_dir / worker_factory.application_id
    _chmod_tree(app_dir, writable=False)
    try:
        produce(500)
        code = worker.wait_exit(60)
    finally:
        _chmod_tree(app_dir, writable=True)

    assert code == 1, worker.log_tail()
    errors = [line for line in worker.logs().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, worker.log_tail()
    assert "Permission denied" in errors[0] or "read-only" in errors[0].lower(), errors[0]
    assert str(app_dir) in errors[0], errors[0]

    # Writable again: the same state dir restarts without wiping anything and finishes.
    worker.start()
    worker.wait_ready(90)
    produce(200)
    expected = Counter(sent)

    def committed_counts() -> dict[str, int]:
        topic = f"{worker_factory.application_id}-{counting.COUNTS}-changelog"
        table: dict[bytes, bytes] = {}
        for p in range(PARTITIONS):
            table.update(fold(read_partition(bootstrap, topic, p)))
        return {k.decode(): orjson.loads(v) for k, v in table.items()}

    wait_until(lambda: committed_counts() == expected, 60, message="counts equal the recount")
    assert worker.metric("worker_state_wipes_total") == 0, "no store was corrupt"
    assert worker.terminate() == 0
