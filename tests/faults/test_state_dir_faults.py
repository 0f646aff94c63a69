"""The state directory's disk fills up, or turns read-only, under a running worker: a
clear error naming the directory, and no corrupt store on the restart after.

- Full: the state dir lives on a tmpfs of its own (the suite runs as root, which may
  mount one) that the test fills with a filler file; RocksDB and the .checkpoint writer
  get ENOSPC, exactly as on a full volume.
- Read-only: root ignores file permissions, so the worker is started through ``setpriv``
  without the capabilities that let it (as tests/integration/test_startup_errors.py does
  with prctl), and the chmod bites.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import fold, read_partition
from tests.support.waiting import wait_until
from worker.config import load
from worker.dev.processes import WorkerProcess
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux setpriv"),
]

PARTITIONS = 2
KEYS = [f"k{i:02d}" for i in range(10)]
APP = "worker.examples.counting:build"
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


class Scenario:
    """The counting app's topics on ``bootstrap``, inputs sent round-robin over KEYS, and
    the recount the counts changelog must end up equal to."""

    def __init__(self, bootstrap: str, application_id: str) -> None:
        self.bootstrap = bootstrap
        self.application_id = application_id
        self.sent: list[str] = []
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        self._settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings

    def settings(self) -> dict[str, object]:
        return {
            "bootstrap.servers": self.bootstrap,
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 200,
            "statestore.checkpoint.interval.ms": 0,  # flush and write .checkpoint every commit
            "num.standby.replicas": 0,
        }

    def produce(self, count: int) -> None:
        first = len(self.sent)
        keys = [KEYS[(first + i) % len(KEYS)] for i in range(count)]
        records = [(k, {"id": first + i}) for i, k in enumerate(keys)]
        produce_records(self._settings, counting.INPUTS, records, STR, JSON)
        self.sent.extend(keys)

    def committed_counts(self) -> dict[str, int]:
        topic = f"{self.application_id}-{counting.COUNTS}-changelog"
        table: dict[bytes, bytes] = {}
        for p in range(PARTITIONS):
            table.update(fold(read_partition(self.bootstrap, topic, p)))
        return {k.decode(): orjson.loads(v) for k, v in table.items()}

    def run_into(self, worker: WorkerProcess, fault: Callable[[], None], undo: Callable[[], None]):  # type: ignore[no-untyped-def]
        """Process some input, apply ``fault`` and send more: the worker must stop with
        exit code 1 and one error line. ``undo`` the fault, restart over the same state
        dir: nothing wiped, and the counts end up equal to the recount. Returns the error."""
        worker.start()
        worker.wait_ready(90)
        self.produce(500)
        worker.wait_for_metric("worker_commits_total", lambda v: v > 0, 30)
        wait_until(lambda: worker.metric("worker_processed_records_total") >= 500, 30)
        fault()
        try:
            self.produce(500)
            code = worker.wait_exit(60)
        finally:
            undo()
        assert code == 1, worker.log_tail()
        errors = [line for line in worker.logs().splitlines() if line.startswith("error:")]
        assert len(errors) == 1, worker.log_tail()

        worker.start()
        worker.wait_ready(90)
        self.produce(200)
        expected = Counter(self.sent)
        wait_until(lambda: self.committed_counts() == expected, 60, message="counts = recount")
        assert worker.metric("worker_state_wipes_total") == 0, "no store was corrupt"
        assert worker.terminate() == 0
        return errors[0]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs of this test's own, unmounted at teardown."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, f"this test mounts a tmpfs (needs root): {mounted.stderr}"
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=False)


@pytest.mark.duration(14)
def test_a_full_disk_stops_the_worker_clearly_and_leaves_no_corrupt_store(
    own_broker, worker_factory, small_disk
):
    scenario = Scenario(own_broker.bootstrap, worker_factory.application_id)
    worker = worker_factory(
        "w",
        settings=scenario.settings(),
        args=["--app", APP],
        state_dir=small_disk / "state",
        start=False,
    )
    filler = small_disk / "filler"

    def fill() -> None:
        """Take every free byte: then every new block RocksDB or a .checkpoint needs fails."""
        with open(filler, "wb") as out:
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    out.write(chunk)
                    out.flush()
            except OSError:
                pass
        stats = os.statvfs(small_disk)
        assert stats.f_bavail * stats.f_frsize < 1 << 20, "the disk is full"

    error = scenario.run_into(worker, fill, filler.unlink)

    assert "No space left on device" in error, error
    assert str(small_disk / "state") in error, error


@pytest.mark.duration(14)
def test_a_read_only_state_dir_stops_the_worker_clearly_and_leaves_no_corrupt_store(
    own_broker, worker_factory
):
    scenario = Scenario(own_broker.bootstrap, worker_factory.application_id)
    factory_worker = worker_factory(
        "w",
        settings=scenario.settings(),
        args=["--app", APP],
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
    app_dir = worker.state_dir / worker_factory.application_id

    error = scenario.run_into(
        worker,
        lambda: _chmod_tree(app_dir, writable=False),
        lambda: _chmod_tree(app_dir, writable=True),
    )

    assert "permission denied" in error.lower() or "read-only" in error.lower(), error
    assert str(app_dir) in error, error
