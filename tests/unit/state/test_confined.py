"""Deletes stay inside the application directory: links refused, never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.unit.state.test_directory import clock, state_dir
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.errors import UnsafeStatePath
from worker.events import STATE_SYMLINK_REFUSED
from worker.state.confined import check_inside, delete_contents, remove_dir, remove_tree
from worker.state.directory import StateDirectory

__all__ = ["clock", "state_dir"]  # fixtures shared with test_directory

T01 = TaskId(0, 1)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the state directory holding files nothing may delete."""
    path = tmp_path / "precious"
    (path / "sub").mkdir(parents=True)
    (path / "a.txt").write_text("a")
    (path / "sub" / "b.txt").write_text("b")
    return path


def intact(outside: Path) -> bool:
    return (outside / "a.txt").read_text() == "a" and (outside / "sub" / "b.txt").exists()


def make_old(path: Path, clock: FakeClock) -> None:
    then = clock.wall() - 3600
    os.utime(path, (then, then), follow_symlinks=False)


def test_a_path_through_a_link_or_dot_dot_or_outside_is_refused(
    tmp_path: Path, outside: Path
) -> None:
    base = tmp_path / "app"
    base.mkdir()
    (base / "0_1").symlink_to(outside)

    for path in (base / "0_1", base / "0_1" / "sub", base / ".." / "precious", outside, base):
        with pytest.raises(UnsafeStatePath):
            check_inside(base, path)
        with pytest.raises(UnsafeStatePath):
            delete_contents(base, path)
    assert intact(outside)


def test_a_link_inside_a_directory_is_removed_as_a_link_and_its_target_kept(
    tmp_path: Path, outside: Path
) -> None:
    base = tmp_path / "app"
    (base / "0_1" / "rocksdb").mkdir(parents=True)
    (base / "0_1" / "rocksdb" / "to-dir").symlink_to(outside)
    (base / "0_1" / "to-file").symlink_to(outside / "a.txt")
    (base / "0_1" / ".lock").write_text("")

    delete_contents(base, base / "0_1", keep={".lock"})

    assert [p.name for p in (base / "0_1").iterdir()] == [".lock"]
    assert intact(outside)
    remove_dir(base, base / "0_1", files=(".lock",))
    assert list(base.iterdir()) == []


def test_the_base_may_itself_be_reached_through_a_link(tmp_path: Path) -> None:
    real = tmp_path / "volume"
    (real / "0_1").mkdir(parents=True)
    (real / "0_1" / "x").write_text("x")
    (tmp_path / "mounted").symlink_to(real)

    delete_contents(tmp_path / "mounted", tmp_path / "mounted" / "0_1")

    assert list((real / "0_1").iterdir()) == []


@pytest.mark.parametrize("app_id", [".", "..", "", "a/b", "...", "x" * 201])
def test_an_application_id_that_is_not_one_directory_name_is_refused(
    tmp_path: Path, app_id: str
) -> None:
    with pytest.raises(UnsafeStatePath, match="application.id"):
        StateDirectory(tmp_path / "state", app_id)


def test_a_linked_task_directory_is_not_listed_and_is_reported_once(
    state_dir: StateDirectory, outside: Path
) -> None:
    (state_dir.app_dir / "0_1").symlink_to(outside)
    state_dir.task_dir(TaskId(0, 2))

    with capture_logs() as logs:
        assert state_dir.list_task_ids() == [TaskId(0, 2)]
        assert state_dir.list_non_empty_task_ids() == []
    refused = [e for e in logs if e["event"] == STATE_SYMLINK_REFUSED]
    assert len(refused) == 1
    assert refused[0]["path"] == str(state_dir.app_dir / "0_1")
    assert refused[0]["target"] == str(outside)


def test_the_cleaner_leaves_a_linked_task_directory_and_its_target_alone(
    state_dir: StateDirectory, outside: Path, clock: FakeClock
) -> None:
    link = state_dir.app_dir / "0_1"
    link.symlink_to(outside)
    make_old(link, clock)
    make_old(outside, clock)

    assert state_dir.clean_unowned(delay_ms=0) == []
    assert link.is_symlink()
    assert intact(outside)


def test_a_task_directory_that_is_a_link_cannot_be_used_or_wiped(
    state_dir: StateDirectory, outside: Path
) -> None:
    owner = object()
    assert state_dir.lock_task(T01, owner)
    state_dir.unlock_task(T01, owner)
    # swapped for a link behind the worker's back while it held the lock
    assert state_dir.lock_task(T01, owner)
    (state_dir.app_dir / "0_1" / ".lock").unlink()
    (state_dir.app_dir / "0_1").rmdir()
    (state_dir.app_dir / "0_1").symlink_to(outside)

    with pytest.raises(UnsafeStatePath, match="symbolic link"):
        state_dir.wipe_task(T01, owner)
    with pytest.raises(UnsafeStatePath, match="symbolic link"):
        state_dir.task_dir(T01)
    assert intact(outside)


def test_remove_tree_removes_a_real_tree_skips_a_missing_one_and_refuses_a_link(
    tmp_path: Path, outside: Path
) -> None:
    store = tmp_path / "store"
    (store / ".atomic-flush" / "sub").mkdir(parents=True)
    (store / ".atomic-flush" / "sub" / "x.sst").write_bytes(b"x")
    (store / ".atomic-flush" / "out").symlink_to(outside)
    (store / ".atomic-flush.tmp").symlink_to(outside)

    remove_tree(store, store / ".atomic-flush")
    remove_tree(store, store / "missing")

    assert not (store / ".atomic-flush").exists()
    with pytest.raises(UnsafeStatePath):
        remove_tree(store, store / ".atomic-flush.tmp")
    assert intact(outside)
