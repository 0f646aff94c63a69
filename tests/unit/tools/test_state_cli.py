"""``worker state list|wipe``, ``worker config show`` and ``worker version``, run as real
processes over a state directory built here (no broker; lag has its own integration test)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.ports import PortRegistry
from worker import __version__
from worker.assignment.task_id import TaskId
from worker.state.checkpoint import write_checkpoint
from worker.state.directory import StateDirectory
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

APP = "tools-app"
CHANGELOG = f"{APP}-counts-changelog"


def run(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
    )


def state(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    command, rest = args[0], args[1:]
    return run(
        "state", command, "--state-dir", str(root), "--set", f"application.id={APP}", *rest,
        stdin=stdin,
    )  # fmt: skip


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """Three task directories: 0_0 and 0_1 with a committed store, 0_2 with only a
    .checkpoint that is behind its store (as after a crash)."""
    root = tmp_path / "state"
    env = RocksDBEnv(16 * MiB)
    directory = StateDirectory(root, APP)
    directory.open()
    try:
        for partition, keys in ((0, 3), (1, 5), (2, 2)):
            task = TaskId(0, partition)
            store = Store.open(directory.store_path(task, "counts"), env, "counts")
            for i in range(keys):
                store.put(b"k%d" % i, b"v")
            store.commit({(CHANGELOG, partition): 10 * partition + keys})
            store.flush()
            store.close()
            write_checkpoint(directory.checkpoint_path(task), {(CHANGELOG, partition): partition})
    finally:
        directory.close()
    yield root


def listing(root: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    result = state(root, "list", "--json", "--no-lag", *extra)
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)  # type: ignore[no-any-return]


def test_list_reads_offsets_sizes_and_key_counts_from_the_stores_when_no_worker_runs(
    root: Path,
) -> None:
    doc = listing(root)
    assert doc["offsets_from"] == "store"
    assert doc["in_use_by_pid"] is None
    tasks = {t["task_id"]: t for t in doc["tasks"]}
    assert sorted(tasks) == ["0_0", "0_1", "0_2"]
    t1 = tasks["0_1"]
    assert t1["checkpoint"] is True
    assert t1["bytes"] > 0
    (store,) = t1["stores"]
    assert store["name"] == "counts" and store["bytes"] > 0 and store["keys"] == 5
    assert t1["offsets"] == [
        {"topic": CHANGELOG, "partition": 1, "offset": 15, "end": None, "lag": None}
    ]
    assert tasks["0_2"]["offsets"][0]["offset"] == 22  # the store's, not the older .checkpoint


def test_list_falls_back_to_checkpoint_files_while_a_worker_holds_the_state_dir(
    root: Path,
) -> None:
    live = StateDirectory(root, APP)
    live.open()  # this test process plays the running worker
    try:
        doc = listing(root)
    finally:
        live.close()
    assert doc["offsets_from"] == "checkpoint"
    assert doc["in_use_by_pid"] == str(os.getpid())
    offsets = {t["task_id"]: t["offsets"][0]["offset"] for t in doc["tasks"]}
    assert offsets == {"0_0": 0, "0_1": 1, "0_2": 2}  # what the .checkpoint files say
    assert all(s["keys"] is None for t in doc["tasks"] for s in t["stores"])


def test_list_as_text_names_the_source_of_the_offsets(root: Path) -> None:
    result = state(root, "list", "--no-lag")
    assert result.returncode == 0, result.stderr
    assert "not in use; offsets read from the stores" in result.stdout
    assert f"changelog {CHANGELOG}-1  offset 15" in result.stdout
    assert "store counts" in result.stdout


def test_list_without_a_reachable_broker_says_the_lag_is_unknown(
    root: Path, ports: PortRegistry
) -> None:
    unreachable = f"127.0.0.1:{ports.take()}"
    result = state(root, "list", "--json", "--timeout", "0.5", "--set",
                   f"bootstrap.servers={unreachable}")  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = orjson.loads(result.stdout)
    assert doc["ends_known"] is False
    assert any("lag unknown" in note and unreachable in note for note in doc["notes"])


def test_list_of_a_missing_application_names_the_ones_that_exist(root: Path) -> None:
    result = run("state", "list", "--state-dir", str(root), "--set", "application.id=other")
    assert result.returncode == 1
    assert "no state for application.id 'other'" in result.stderr
    assert APP in result.stderr


def test_wipe_deletes_the_task_directories_and_nothing_else(root: Path) -> None:
    result = state(root, "wipe", "0_1", "0_2", "--yes")
    assert result.returncode == 0, result.stderr
    assert "wiped 0_1" in result.stdout and "wiped 0_2" in result.stdout
    assert not (root / APP / "0_1").exists() and not (root / APP / "0_2").exists()
    assert [t["task_id"] for t in listing(root)["tasks"]] == ["0_0"]
    assert (root / APP / "process.json").exists()


def test_wipe_refuses_while_a_live_process_holds_the_lock(root: Path) -> None:
    live = StateDirectory(root, APP)
    live.open()
    try:
        result = state(root, "wipe", "0_1", "--yes")
    finally:
        live.close()
    assert result.returncode == 1
    assert "in use by a live worker" in result.stderr
    assert f"pid {os.getpid()}" in result.stderr
    assert (root / APP / "0_1" / "rocksdb" / "counts").is_dir()


def test_wipe_of_an_unknown_task_wipes_nothing(root: Path) -> None:
    result = state(root, "wipe", "0_1", "0_9", "--yes")
    assert result.returncode == 1
    assert "no task directory 0_9" in result.stderr
    assert (root / APP / "0_1" / "rocksdb").is_dir()


def test_wipe_with_a_malformed_task_id_is_a_usage_error(root: Path) -> None:
    result = state(root, "wipe", "zero-one", "--yes")
    assert result.returncode == 2
    assert "not a task id" in result.stderr


def test_wipe_asks_first_and_no_means_no(root: Path) -> None:
    declined = state(root, "wipe", "0_0", stdin="n\n")
    assert declined.returncode == 1
    assert (root / APP / "0_0").is_dir()
    accepted = state(root, "wipe", "0_0", stdin="y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert not (root / APP / "0_0").exists()


def test_config_show_prints_each_value_with_where_it_came_from(tmp_path: Path) -> None:
    config = tmp_path / "worker.toml"
    config.write_text('commit.interval.ms = 1000\npoll.ms = 20\n[kafka]\n"client.rack" = "r1"\n')
    result = run(
        "config", "show", "--config", str(config), "--set", "poll.ms=30",
        env={"WORKER_SHUTDOWN_TIMEOUT_MS": "5000"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" = ", 1) for line in result.stdout.splitlines())
    assert lines["commit.interval.ms"] == f"1000    # file:{config}"
    assert lines["poll.ms"] == "30    # --set"
    assert lines["shutdown.timeout.ms"] == "5000    # env:WORKER_SHUTDOWN_TIMEOUT_MS"
    assert lines["num.standby.replicas"] == "1    # default"
    assert lines["kafka.client.rack"] == f"r1    # file:{config}"


def test_version_prints_the_package_version() -> None:
    result = run("version")
    assert (result.returncode, result.stdout.strip()) == (0, f"worker {__version__}")
