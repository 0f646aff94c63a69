"""StateDirectory: layout, process id, process and task locks, emptiness, wipe, cleaner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.errors import StateDirError, StateLocked
from worker.state.directory import StateDirectory

APP = "orders-app"
T01 = TaskId(0, 1)
T02 = TaskId(0, 2)
T13 = TaskId(1, 3)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now=time.time())


@pytest.fixture
def state_dir(tmp_path: Path, clock: FakeClock) -> Iterator[StateDirectory]:
    directory = StateDirectory(tmp_path / "state", APP, clock)
    directory.open()
    yield directory
    directory.close()


def age(path: Path, seconds: float, clock: FakeClock) -> None:
    """Set ``path``'s mtime ``seconds`` before the fake clock's now."""
    then = clock.wall() - seconds
    os.utime(path, (then, then))


def test_open_creates_app_dir_with_restricted_mode_lock_and_process_file(
    state_dir: StateDirectory, tmp_path: Path
) -> None:
    app_dir = tmp_path / "state" / APP

    assert state_dir.app_dir == app_dir
    assert app_dir.is_dir()
    assert app_dir.stat().st_mode & 0o027 == 0
    assert (app_dir / ".lock").read_text().strip() == str(os.getpid())
    content = json.loads((app_dir / "process.json").read_text())
    assert content == {"version": 1, "process_id": state_dir.process_id}
    assert uuid.UUID(state_dir.process_id).version == 4


def test_process_id_is_stable_across_restarts(tmp_path: Path) -> None:
    first = StateDirectory(tmp_path, APP)
    first.open()
    process_id = first.process_id
    first.close()

    second = StateDirectory(tmp_path, APP)
    second.open()
    try:
        assert second.process_id == process_id
    finally:
        second.close()


@pytest.mark.parametrize(
    "content", ["{not json", '{"version": 1}', '{"version": 2, "process_id": "x"}', "[]"]
)
def test_unreadable_process_file_is_regenerated(tmp_path: Path, content: str) -> None:
    (tmp_path / APP).mkdir(parents=True)
    (tmp_path / APP / "process.json").write_text(content)

    directory = StateDirectory(tmp_path, APP)
    directory.open()
    try:
        uuid.UUID(directory.process_id)
        saved = json.loads((tmp_path / APP / "process.json").read_text())
        assert saved["process_id"] == directory.process_id
    finally:
        directory.close()


def test_member_id_is_kept_across_restarts_until_cleared(tmp_path: Path) -> None:
    first = StateDirectory(tmp_path / "state", APP)
    first.open()
    assert first.previous_member_id() is None
    first.save_member_id("member-1")
    first.close()  # a crash leaves the file as it is

    second = StateDirectory(tmp_path / "state", APP)
    second.open()
    assert second.previous_member_id() == "member-1"
    second.save_member_id(None)  # left the group cleanly
    assert second.previous_member_id() is None
    second.close()


@pytest.mark.parametrize("content", ["", "{", '{"version": 9, "member_id": "m"}', "[]"])
def test_unreadable_member_file_means_no_previous_member(
    state_dir: StateDirectory, content: str
) -> None:
    (state_dir.app_dir / "member.json").write_text(content)
    assert state_dir.previous_member_id() is None


def test_process_id_before_open_raises(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match="not open"):
        _ = StateDirectory(tmp_path, APP).process_id


def test_root_that_is_a_file_is_refused_with_a_one_line_reason(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.write_text("")

    with pytest.raises(StateDirError) as raised:
        StateDirectory(root, APP).open()

    assert str(root) in str(raised.value)
    assert "not a directory" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_app_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / APP).write_text("")

    with pytest.raises(StateDirError, match="not a directory"):
        StateDirectory(tmp_path, APP).open()


def test_directory_without_write_permission_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real read-only directory is covered end to end (as root too) by
    # tests/integration/test_startup_errors.py; here os.access decides.
    root = tmp_path / "state"
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != root)

    with pytest.raises(StateDirError) as raised:
        StateDirectory(root, APP).open()

    assert str(raised.value) == f"state directory {root} is not usable: permission denied"


def test_directory_that_cannot_be_created_names_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)

    with pytest.raises(StateDirError, match="permission denied"):
        StateDirectory(tmp_path / "state", APP).open()


_OPEN_FROM_ANOTHER_PROCESS = """
import sys
from pathlib import Path
from worker.errors import StateLocked
from worker.state.directory import StateDirectory
try:
    StateDirectory(Path(sys.argv[1]), sys.argv[2]).open()
except StateLocked as exc:
    print(exc)
    sys.exit(3)
"""


def test_second_process_on_the_same_state_dir_is_refused(
    state_dir: StateDirectory, tmp_path: Path
) -> None:
    script = textwrap.dedent(_OPEN_FROM_ANOTHER_PROCESS)
    child = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "state"), APP],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert child.returncode == 3, child.stdout + child.stderr
    pid = os.getpid()
    expected = f"state directory {state_dir.app_dir} is in use by another process (pid {pid})"
    assert child.stdout.strip().splitlines()[-1] == expected  # after the child's log lines


def test_second_state_directory_in_the_same_process_is_refused(
    state_dir: StateDirectory, tmp_path: Path
) -> None:
    with pytest.raises(StateLocked, match=f"pid {os.getpid()}"):
        StateDirectory(tmp_path / "state", APP).open()


def test_close_releases_the_process_lock_and_is_idempotent(tmp_path: Path) -> None:
    first = StateDirectory(tmp_path, APP)
    first.open()
    first.close()
    second = StateDirectory(tmp_path, APP)
    second.open()  # the lock first held is free

    first.close()  # again: it must not release what second holds now

    with pytest.raises(StateLocked, match=f"pid {os.getpid()}"):
        StateDirectory(tmp_path, APP).open()
    second.close()


def test_task_paths_follow_the_layout(state_dir: StateDirectory) -> None:
    task_dir = state_dir.task_dir(T13)

    assert task_dir == state_dir.app_dir / "1_3"
    assert task_dir.is_dir()
    assert state_dir.store_path(T13, "counts") == task_dir / "rocksdb" / "counts"
    assert state_dir.checkpoint_path(T13) == task_dir / ".checkpoint"


def test_task_lock_is_reentrant_for_its_owner_and_refused_to_others(
    state_dir: StateDirectory,
) -> None:
    owner, other = object(), object()

    assert state_dir.lock_task(T01, owner)
    assert state_dir.lock_task(T01, owner)
    assert not state_dir.lock_task(T01, other)
    assert state_dir.task_lock_owner(T01) is owner
    assert (state_dir.task_dir(T01) / ".lock").exists()


def test_unlock_by_a_non_owner_is_ignored(state_dir: StateDirectory) -> None:
    owner, other = object(), object()
    state_dir.lock_task(T01, owner)

    state_dir.unlock_task(T01, other)

    assert state_dir.task_lock_owner(T01) is owner


def test_unlocked_task_can_be_taken_by_another_owner(state_dir: StateDirectory) -> None:
    owner, other = object(), object()
    state_dir.lock_task(T01, owner)

    state_dir.unlock_task(T01, owner)

    assert state_dir.task_lock_owner(T01) is None
    assert state_dir.lock_task(T01, other)


def test_owners_are_compared_by_identity_not_equality(state_dir: StateDirectory) -> None:
    assert state_dir.lock_task(T01, [1])
    assert not state_dir.lock_task(T01, [1])


def test_task_lock_is_an_os_lock_visible_to_other_processes(state_dir: StateDirectory) -> None:
    import fcntl

    state_dir.lock_task(T01, object())
    fd = os.open(state_dir.task_dir(T01) / ".lock", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_close_releases_task_locks(state_dir: StateDirectory) -> None:
    state_dir.lock_task(T01, object())

    state_dir.close()

    assert state_dir.task_lock_owner(T01) is None


def test_task_ids_are_listed_sorted_ignoring_other_names(state_dir: StateDirectory) -> None:
    for name in ("1_3", "0_2", "0_10", "global", "x_1", "0_1.tmp"):
        (state_dir.app_dir / name).mkdir()
    (state_dir.app_dir / "2_2").write_text("a file, not a task dir")

    assert state_dir.list_task_ids() == [TaskId(0, 2), TaskId(0, 10), TaskId(1, 3)]


def test_directory_with_only_checkpoint_and_lock_counts_as_empty(
    state_dir: StateDirectory,
) -> None:
    state_dir.task_dir(T01)
    state_dir.checkpoint_path(T02).write_text("0\n0\n")
    state_dir.lock_task(T02, object())
    (state_dir.store_path(T13, "counts")).mkdir(parents=True)

    assert state_dir.list_non_empty_task_ids() == [T13]


def test_wipe_deletes_everything_but_the_lock(state_dir: StateDirectory) -> None:
    owner = object()
    state_dir.lock_task(T01, owner)
    state_dir.store_path(T01, "counts").mkdir(parents=True)
    (state_dir.store_path(T01, "counts") / "000001.sst").write_bytes(b"x")
    state_dir.checkpoint_path(T01).write_text("0\n0\n")

    state_dir.wipe_task(T01, owner)

    assert [p.name for p in state_dir.task_dir(T01).iterdir()] == [".lock"]
    assert state_dir.task_lock_owner(T01) is owner


def test_wipe_without_holding_the_lock_raises_state_locked(state_dir: StateDirectory) -> None:
    owner = object()
    state_dir.checkpoint_path(T01).write_text("0\n0\n")

    with pytest.raises(StateLocked):
        state_dir.wipe_task(T01, owner)
    state_dir.lock_task(T01, object())
    with pytest.raises(StateLocked):
        state_dir.wipe_task(T01, owner)
    assert state_dir.checkpoint_path(T01).exists()


def test_cleaner_deletes_old_unowned_task_dirs_only(
    state_dir: StateDirectory, clock: FakeClock
) -> None:
    state_dir.store_path(T01, "counts").mkdir(parents=True)  # old, unowned: deleted
    state_dir.task_dir(T02)  # old but owned: kept
    state_dir.lock_task(T02, object())
    state_dir.task_dir(T13)  # unowned but recent: kept
    age(state_dir.app_dir / "0_1", 3600, clock)
    age(state_dir.app_dir / "0_2", 3600, clock)
    age(state_dir.app_dir / "1_3", 60, clock)

    cleaned = state_dir.clean_unowned(delay_ms=600_000)

    assert cleaned == [T01]
    assert state_dir.list_task_ids() == [T02, T13]
    assert state_dir.task_lock_owner(T01) is None


def test_cleaned_task_can_be_locked_and_used_again(
    state_dir: StateDirectory, clock: FakeClock
) -> None:
    state_dir.task_dir(T01)
    age(state_dir.app_dir / "0_1", 3600, clock)
    state_dir.clean_unowned(delay_ms=1000)

    owner = object()

    assert state_dir.lock_task(T01, owner)
    assert state_dir.task_dir(T01).is_dir()


def test_cleaner_skips_dirs_locked_by_another_process(
    state_dir: StateDirectory, clock: FakeClock
) -> None:
    import fcntl

    lock_path = state_dir.task_dir(T01) / ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        age(state_dir.app_dir / "0_1", 3600, clock)

        assert state_dir.clean_unowned(delay_ms=1000) == []
        assert state_dir.list_task_ids() == [T01]
    finally:
        os.close(fd)


def test_cleaner_uses_the_injected_clock(state_dir: StateDirectory, clock: FakeClock) -> None:
    state_dir.task_dir(T01)
    age(state_dir.app_dir / "0_1", 10, clock)
    assert state_dir.clean_unowned(delay_ms=60_000) == []

    clock.advance(120)

    assert state_dir.clean_unowned(delay_ms=60_000) == [T01]
