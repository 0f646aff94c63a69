"""``worker state wipe`` deletes inside ``<state-dir>/<application.id>/`` only: a linked
task directory, a look-alike task name or an application id of dots never lead it out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.tools.test_state_cli import APP, root, run, state

__all__ = ["root"]  # the fixture, shared with test_state_cli


def test_wipe_of_a_linked_task_directory_is_refused_and_its_target_kept(
    root: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("k")
    (root / APP / "0_5").symlink_to(precious)

    result = state(root, "wipe", "0_5", "--yes")

    assert result.returncode == 1
    assert "symbolic link" in result.stderr and "nothing wiped" in result.stderr
    assert "Traceback" not in result.stderr
    assert (precious / "keep.txt").read_text() == "k"
    assert (root / APP / "0_5").is_symlink()


def test_wipe_of_one_task_leaves_a_look_alike_directory_in_place(root: Path) -> None:
    (root / APP / "00_01").mkdir()
    (root / APP / "00_01" / "data").write_text("x")

    assert state(root, "wipe", "0_1", "--yes").returncode == 0
    assert (root / APP / "00_01" / "data").exists()
    refused = state(root, "wipe", "00_01", "--yes")
    assert refused.returncode == 2 and "not a task id" in refused.stderr
    assert (root / APP / "00_01" / "data").exists()


@pytest.mark.parametrize("app_id", [".", "..", "a/b", ""])
def test_an_application_id_that_is_not_one_directory_name_is_a_config_error(
    root: Path, app_id: str
) -> None:
    beside = root.parent / "beside"
    (beside / "0_1").mkdir(parents=True)
    result = run(
        "state", "wipe", "0_1", "--yes", "--state-dir", str(root / APP),
        "--set", f"application.id={app_id}",
    )  # fmt: skip

    assert result.returncode == 2
    assert "application.id" in result.stderr and "Traceback" not in result.stderr
    assert (beside / "0_1").is_dir() and (root / APP / "0_1").is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the directory to another user needs root")
def test_wipe_run_by_another_user_than_the_directory_s_owner_is_refused(root: Path) -> None:
    # root under umask 077 would leave a .lock the worker's own user cannot open.
    for path in (root / APP, *(root / APP).rglob("*")):
        os.chown(path, 65534, 65534, follow_symlinks=False)
    (root / APP / ".lock").unlink()

    result = state(root, "wipe", "0_1", "--yes")

    assert result.returncode == 1
    assert "belongs to uid 65534" in result.stderr and "Traceback" not in result.stderr
    assert (root / APP / "0_1" / "rocksdb" / "counts").is_dir()
    assert not (root / APP / ".lock").exists()
