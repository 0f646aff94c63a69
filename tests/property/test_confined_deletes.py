"""Whatever the application directory holds (links, odd names, a directory swapped for a
link mid-delete), the cleaner and the wipe delete nothing outside it, and nothing a
running task holds."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.errors import UnsafeStatePath
from worker.state.confined import remove_dir
from worker.state.directory import LOCK_FILE, StateDirectory

APP = "app"
# Names a task directory has, names that look like one but are not, and other odd ones.
NAMES = st.sampled_from(
    ["0_1", "0_2", "1_0", "00_03", "0_3 ", "0_3\n", "+1_2", "\u0663_1", "0_-1", "..."]
    + ["global", "process.json.tmp", " ", "-", "\u00e9", "a\\b", "0_1.tmp"]
)
KINDS = st.sampled_from(["dir", "dir_linking_out", "link_to_dir", "link_to_file", "dangling"])


def plant(app_dir: Path, outside: Path, name: str, kind: str) -> None:
    path = app_dir / name
    if kind == "dir":
        (path / "rocksdb" / "s").mkdir(parents=True)
        (path / "rocksdb" / "s" / "000001.sst").write_bytes(b"x")
    elif kind == "dir_linking_out":
        path.mkdir()
        (path / "out").symlink_to(outside)
        (path / "file-out").symlink_to(outside / "a.txt")
    elif kind == "link_to_dir":
        path.symlink_to(outside)
    elif kind == "link_to_file":
        path.symlink_to(outside / "a.txt")
    else:
        path.symlink_to(app_dir / "no-such-thing")


def fingerprint(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def make_outside(tmp: Path) -> Path:
    outside = tmp / "precious"
    (outside / "sub").mkdir(parents=True, exist_ok=True)
    (outside / "a.txt").write_text("a")
    (outside / "sub" / "b.txt").write_text("b")
    return outside


def clean_while(
    directory: StateDirectory,
    other: Callable[[], None],
    stop: threading.Event,
    rounds: dict[str, int],
) -> None:
    """Run the cleaner (delay 0) over and over for 3 s, and on until ``other`` (run in a
    thread until ``stop``) has counted 20 ``rounds["n"]``; the cleaner must never raise."""
    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    deadline = time.monotonic() + 3.0
    try:
        while time.monotonic() < deadline or rounds["n"] < 20:
            directory.clean_unowned(delay_ms=0)
            assert time.monotonic() < deadline + 30, "the other thread made no progress"
    finally:
        stop.set()
        thread.join(10)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(layout=st.dictionaries(NAMES, KINDS, max_size=8))
def test_cleaner_and_wipe_delete_nothing_outside_or_beside_the_task_directories(
    tmp_path_factory: object, layout: dict[str, str]
) -> None:
    tmp = tmp_path_factory.mktemp("confined")  # type: ignore[attr-defined]
    outside = make_outside(tmp)
    before = fingerprint(outside)
    directory = StateDirectory(tmp / "state", APP, FakeClock(now=time.time() + 3600))
    directory.open()
    try:
        for name, kind in layout.items():
            plant(directory.app_dir, outside, name, kind)
        real_tasks = {
            TaskId.parse(n) for n, k in layout.items() if TaskId.is_task_name(n) and k[:3] == "dir"
        }
        assert set(directory.list_task_ids()) == real_tasks

        cleaned = directory.clean_unowned(delay_ms=0)

        assert set(cleaned) == real_tasks
        for name, kind in layout.items():
            path = directory.app_dir / name
            if TaskId.is_task_name(name) and kind.startswith("dir"):
                assert not os.path.lexists(path)
            else:
                assert os.path.lexists(path), f"{name!r} ({kind}) is not a task's: kept"
        assert fingerprint(outside) == before
    finally:
        directory.close()


def test_a_task_directory_swapped_for_a_link_while_the_cleaner_runs_never_leads_it_out(
    tmp_path: Path,
) -> None:
    outside = make_outside(tmp_path)
    before = fingerprint(outside)
    directory = StateDirectory(tmp_path / "state", APP, FakeClock(now=time.time() + 3600))
    directory.open()
    task = directory.app_dir / "0_1"
    stop = threading.Event()
    swaps = {"n": 0}

    def swapper() -> None:
        """Put a real task directory in place, then swap it for a link, over and over;
        each step may find the cleaner was there first."""
        app = directory.app_dir
        while not stop.is_set():
            shutil.rmtree(app / "staging", ignore_errors=True)
            plant(app, outside, "staging", "dir_linking_out")
            with contextlib.suppress(OSError):
                task.unlink()  # the link of the previous round
            with contextlib.suppress(OSError):
                os.rename(app / "staging", task)
            with contextlib.suppress(OSError):
                os.rename(task, app / "old")
            with contextlib.suppress(OSError):
                task.symlink_to(outside)
            shutil.rmtree(app / "old", ignore_errors=True)
            swaps["n"] += 1

    try:
        clean_while(directory, swapper, stop, swaps)  # a link met mid-clean is skipped
    finally:
        directory.close()
    assert fingerprint(outside) == before


def test_the_cleaner_never_deletes_what_a_running_task_holds(tmp_path: Path) -> None:
    directory = StateDirectory(tmp_path / "state", APP, FakeClock(now=time.time() + 3600))
    directory.open()
    stop = threading.Event()
    lost: list[str] = []
    rounds = {"n": 0}

    def task_thread() -> None:
        owner = object()
        while not stop.is_set():
            if not directory.lock_task(TaskId(0, 1), owner):
                continue
            data = directory.task_dir(TaskId(0, 1)) / "data"
            data.write_text("x")
            for _ in range(50):
                if not data.exists():
                    lost.append(f"round {rounds['n']}")
            directory.unlock_task(TaskId(0, 1), owner)
            rounds["n"] += 1

    try:
        clean_while(directory, task_thread, stop, rounds)
    finally:
        directory.close()
    assert lost == []


def test_remove_dir_refuses_a_link_in_place_of_the_directory(tmp_path: Path) -> None:
    outside = make_outside(tmp_path)
    app = tmp_path / "state" / APP
    app.mkdir(parents=True)
    (app / "0_1").symlink_to(outside)
    before = fingerprint(outside)

    try:
        remove_dir(app, app / "0_1", files=(LOCK_FILE, "a.txt"))
    except UnsafeStatePath:
        pass
    else:
        raise AssertionError("a link was removed as a directory")
    assert fingerprint(outside) == before
