"""``worker state list`` is read-only: no file created or changed, no lock ever taken, so
it can run as root beside a worker running as its service user."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.unit.tools.test_state_cli import APP, listing, root, state
from worker.state.directory import StateDirectory

__all__ = ["root"]  # the fixture, shared with test_state_cli


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under ``root``: mode, size, mtime and content hash of files."""
    found: dict[str, tuple[int, int, int, str]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return found


def test_list_reads_the_stores_and_changes_no_file(root: Path) -> None:
    (root / APP / "process.json").unlink()
    before = snapshot(root)

    inventory = listing(root)

    assert inventory["offsets_from"] == "store" and inventory["in_use_by_pid"] is None
    assert [t["offsets"][0]["offset"] for t in inventory["tasks"]] == [3, 15, 22]
    assert snapshot(root) == before


def test_list_beside_a_live_worker_reads_checkpoints_and_changes_no_file(root: Path) -> None:
    live = StateDirectory(root, APP)
    live.open()
    try:
        before = snapshot(root)
        inventory = listing(root)
        assert snapshot(root) == before
    finally:
        live.close()
    assert inventory["offsets_from"] == "checkpoint"
    assert inventory["in_use_by_pid"] == str(os.getpid())


def test_list_works_on_a_read_only_file_system(root: Path, tmp_path: Path) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a read-only bind mount")
    mount = f"mount --bind {root} {root} && mount -o remount,bind,ro {root}"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{mount} && ! touch {root}/probe"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.decode().strip()}")
    command = " ".join(
        [sys.executable, "-m", "worker", "state", "list", "--json", "--no-lag",
         "--state-dir", str(root), "--set", f"application.id={APP}"]
    )  # fmt: skip
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{mount} && exec {command}"],
        capture_output=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("WORKER_")},
    )

    assert result.returncode == 0, result.stderr.decode()
    inventory = orjson.loads(result.stdout)
    assert inventory["offsets_from"] == "store"
    assert all(s["error"] is None for t in inventory["tasks"] for s in t["stores"])
    assert state(root, "list", "--no-lag").returncode == 0
