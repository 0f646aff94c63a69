"""The state directory of one worker process: layout, process id, locks, cleaner.

Layout::

    <root>/<application_id>/
        process.json        {"version": 1, "process_id": "<uuid4>"}, stable across restarts
        member.json         {"version": 1, "member_id": "..."}: the group member id this
                            process last had, while it has not left the group cleanly
        .lock               flock'ed by the one process using this directory (holds its pid)
        <subtopology>_<partition>/
            .lock           flock'ed while a task object owns the directory
            .checkpoint     changelog offsets for readers that do not open the stores
            rocksdb/<store>/

Task locks are two things at once: an in-process owner map (which task object owns the
directory, so ownership can be handed over in one step, as recycling an initial standby
into an assigned task needs) and an ``flock`` on ``<task>/.lock`` (so tools running
beside the worker see the directory in use). Owners are compared by identity.

Nothing is deleted outside ``<root>/<application_id>/``: every delete goes through
:mod:`worker.state.confined`, and a symbolic link where a task directory belongs is
neither listed, cleaned nor wiped (it is logged as ``state.symlink_refused``).

Thread-safety: every method may be called from any thread (the cleaner runs on its own);
the owner map is guarded by one mutex, never held while deleting files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import threading
import uuid
from pathlib import Path

from worker.assignment.task_id import TaskId
from worker.clock import Clock, SystemClock
from worker.config import check_application_id
from worker.errors import StateDirError, StateLocked, UnsafeStatePath
from worker.events import STATE_SYMLINK_REFUSED
from worker.observability import get_logger
from worker.state.checkpoint import replace_file_atomically
from worker.state.confined import check_inside, delete_contents, open_file, remove_dir

PROCESS_FILE = "process.json"
MEMBER_FILE = "member.json"
LOCK_FILE = ".lock"
CHECKPOINT_FILE = ".checkpoint"
STORES_DIR = "rocksdb"
_PROCESS_FILE_VERSION = 1
_DIR_MODE = 0o750
_CLEANER = object()  # owner of the task locks the cleaner takes

_log = get_logger(component="state_directory")


class StateDirectory:
    """Owns ``<root>/<application_id>/``: its process lock, process id and task locks.

    Lifecycle: construct -> :meth:`open` (takes the process lock) -> ... -> :meth:`close`
    (releases every lock; idempotent).
    """

    def __init__(self, root: Path, application_id: str, clock: Clock | None = None) -> None:
        """Raises UnsafeStatePath for an application id that is not one plain file name."""
        try:
            check_application_id(application_id)
        except ValueError as exc:
            raise UnsafeStatePath(f"application.id {application_id!r} {exc}") from None
        self.root = root
        self.app_dir = root / application_id
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._mutex = threading.Lock()
        self._task_locks: dict[TaskId, tuple[object, int]] = {}  # owner, lock file fd
        self._process_lock_fd: int | None = None
        self._process_id: str | None = None
        self._links_reported: set[str] = set()

    def open(self) -> None:
        """Create the directories, take the process lock, load or create the process id.

        Raises:
            StateDirError: root or app dir is not a directory or not writable.
            StateLocked: another process holds ``<app>/.lock``.
        """
        if self._process_lock_fd is not None:
            return
        for directory in (self.root, self.app_dir):
            _make_dir(directory)
        if Path(tempfile.gettempdir()) in self.root.resolve().parents:
            _log.warning("state.dir_in_tmp", path=str(self.root))
        self._process_lock_fd = self._lock_process()
        try:
            self._process_id = self._load_process_id()
        except BaseException:
            self.close()
            raise
        _log.info("state.dir_opened", path=str(self.app_dir), process_id=self._process_id)

    @property
    def process_id(self) -> str:
        """This process's stable id. Raises StateDirError before :meth:`open`."""
        if self._process_id is None:
            raise StateDirError(f"state directory {self.app_dir} is not open")
        return self._process_id

    def previous_member_id(self) -> str | None:
        """The group member id of this process's previous run, if it did not leave cleanly.

        A run that was killed is still a member until its session times out; the next run
        removes it from the group at start-up instead of waiting (``GroupMember.start``).
        """
        try:
            data = json.loads((self.app_dir / MEMBER_FILE).read_text(encoding="utf-8"))
            if data["version"] == _PROCESS_FILE_VERSION and data["member_id"]:
                return str(data["member_id"])
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _log.warning("state.member_file_unreadable", error=str(exc))
        return None

    def save_member_id(self, member_id: str | None) -> None:
        """Remember the member id this run has now (None: it left the group cleanly).

        Best effort: without the file the next run only waits for the session timeout.
        """
        path = self.app_dir / MEMBER_FILE
        try:
            if member_id is None:
                path.unlink(missing_ok=True)
            else:
                content = {"version": _PROCESS_FILE_VERSION, "member_id": member_id}
                replace_file_atomically(path, json.dumps(content).encode("utf-8"))
        except OSError as exc:
            _log.warning("state.member_file_unwritable", path=str(path), error=str(exc))

    def close(self) -> None:
        """Release every task lock and the process lock. Idempotent."""
        with self._mutex:
            held = list(self._task_locks.items())
            self._task_locks.clear()
        if held:
            _log.warning("state.tasks_locked_at_close", tasks=sorted(str(t) for t, _ in held))
        for _task_id, (_owner, fd) in held:
            _release(fd)
        if self._process_lock_fd is not None:
            _release(self._process_lock_fd)
            self._process_lock_fd = None

    def task_dir(self, task_id: TaskId) -> Path:
        """``<app>/<task_id>``, created if missing.

        Raises:
            UnsafeStatePath: it is a symbolic link (the worker keeps no state through one).
        """
        path = self.app_dir / str(task_id)
        check_inside(self.app_dir, path)
        _make_dir(path)
        return path

    def store_path(self, task_id: TaskId, store_name: str) -> Path:
        """``<app>/<task_id>/rocksdb/<store_name>`` (the store creates it when opened)."""
        return self.task_dir(task_id) / STORES_DIR / store_name

    def checkpoint_path(self, task_id: TaskId) -> Path:
        return self.task_dir(task_id) / CHECKPOINT_FILE

    def lock_task(self, task_id: TaskId, owner: object) -> bool:
        """Lock the task directory for ``owner``; True if now held by it (or already was).

        False if another owner (or another process) holds it: the caller retries later.
        """
        with self._mutex:
            held = self._task_locks.get(task_id)
            if held is not None:
                return held[0] is owner
            fd = self._try_flock(self.task_dir(task_id) / LOCK_FILE)
            if fd is None:
                return False
            self._task_locks[task_id] = (owner, fd)
            return True

    def unlock_task(self, task_id: TaskId, owner: object) -> None:
        """Release the task lock if ``owner`` holds it; otherwise do nothing."""
        with self._mutex:
            held = self._task_locks.get(task_id)
            if held is None or held[0] is not owner:
                return
            del self._task_locks[task_id]
        _release(held[1])

    def task_lock_owner(self, task_id: TaskId) -> object | None:
        with self._mutex:
            held = self._task_locks.get(task_id)
        return None if held is None else held[0]

    def list_task_ids(self) -> list[TaskId]:
        """Task directories on disk, sorted; other names are ignored.

        A symbolic link with a task's name is left out (and logged once per process as
        ``state.symlink_refused``): the start-up scan, the cleaner and the wipe never act
        through it.
        """
        try:
            entries = list(self.app_dir.iterdir())
        except FileNotFoundError:
            return []
        found: list[TaskId] = []
        for path in entries:
            if not TaskId.is_task_name(path.name):
                continue
            if path.is_symlink():
                self._report_link(path)
            elif path.is_dir():
                found.append(TaskId.parse(path.name))
        return sorted(found)

    def _report_link(self, path: Path) -> None:
        with self._mutex:
            first = str(path) not in self._links_reported
            self._links_reported.add(str(path))
        if first:
            target: str | None = None
            with contextlib.suppress(OSError):  # the link may be gone again
                target = os.readlink(path)
            _log.warning(
                STATE_SYMLINK_REFUSED,
                path=str(path),
                target=target,
                action="left alone: remove the link by hand",
            )

    def list_non_empty_task_ids(self) -> list[TaskId]:
        """Task directories holding anything besides ``.checkpoint`` and ``.lock``."""
        return [t for t in self.list_task_ids() if not self._is_empty(self.app_dir / str(t))]

    def wipe_task(self, task_id: TaskId, owner: object) -> None:
        """Delete everything in the task directory but its ``.lock``.

        Raises:
            StateLocked: ``owner`` does not hold the task lock.
            UnsafeStatePath: the task directory is a symbolic link now (nothing deleted).
        """
        if self.task_lock_owner(task_id) is not owner or owner is None:
            raise StateLocked(f"cannot wipe task {task_id}: its lock is not held by {owner!r}")
        delete_contents(self.app_dir, self.app_dir / str(task_id), keep={LOCK_FILE})
        _log.info("state.task_wiped", task_id=str(task_id))

    def clean_unowned(self, delay_ms: int) -> list[TaskId]:
        """Delete task directories nobody holds whose mtime is older than ``delay_ms``.

        Each is locked, deleted and unlocked; a failure on one is logged and the rest are
        still cleaned. Returns the tasks deleted.
        """
        deadline = self._clock.wall() - delay_ms / 1000
        cleaned: list[TaskId] = []
        for task_id in self.list_task_ids():
            path = self.app_dir / str(task_id)
            try:
                unowned = self.task_lock_owner(task_id) is None
                if (
                    unowned
                    and path.stat().st_mtime < deadline
                    and self._delete_unowned(task_id, path)
                ):
                    cleaned.append(task_id)
            except (OSError, StateDirError) as exc:
                # StateDirError: the directory was swapped for a link (UnsafeStatePath) or
                # a file meanwhile; left alone, reported, and the rest still cleaned.
                if path.is_symlink():
                    self._report_link(path)
                _log.warning("state.clean_failed", task_id=str(task_id), error=str(exc))
        return cleaned

    def _delete_unowned(self, task_id: TaskId, path: Path) -> bool:
        if not self.lock_task(task_id, _CLEANER):
            return False
        try:
            delete_contents(self.app_dir, path, keep={LOCK_FILE})
        finally:
            with self._mutex:
                _owner, fd = self._task_locks.pop(task_id)
                # Removed under the mutex, so nobody in this process can open the old
                # lock file between the delete and the unlock.
                with contextlib.suppress(OSError):
                    remove_dir(self.app_dir, path, files=(LOCK_FILE,))
                _release(fd)
        _log.info("state.task_cleaned", task_id=str(task_id))
        return True

    @staticmethod
    def _is_empty(path: Path) -> bool:
        try:
            return all(p.name in (CHECKPOINT_FILE, LOCK_FILE) for p in path.iterdir())
        except FileNotFoundError:
            return True

    def _try_flock(self, path: Path) -> int | None:
        """Open the lock file ``path`` (never through a link) and take its flock; None if
        someone holds it."""
        return _flock(open_file(self.app_dir, path, os.O_RDWR | os.O_CREAT))

    def _lock_process(self) -> int:
        path = self.app_dir / LOCK_FILE
        try:
            fd = self._try_flock(path)
        except OSError as exc:
            raise StateDirError(_describe(path, exc)) from exc
        if fd is None:
            pid = _read_pid(path)
            raise StateLocked(
                f"state directory {self.app_dir} is in use by another process (pid {pid})"
            )
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            _release(fd)
            raise StateDirError(_describe(path, exc)) from exc
        return fd

    def _load_process_id(self) -> str:
        path = self.app_dir / PROCESS_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data["version"] == _PROCESS_FILE_VERSION:
                return str(uuid.UUID(data["process_id"]))
            raise ValueError(f"unknown version {data['version']!r}")
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _log.warning("state.process_file_unreadable", path=str(path), error=str(exc))
        process_id = str(uuid.uuid4())
        content = {"version": _PROCESS_FILE_VERSION, "process_id": process_id}
        try:
            replace_file_atomically(path, json.dumps(content).encode("utf-8"))
        except OSError as exc:
            raise StateDirError(_describe(path, exc)) from exc
        return process_id


def _make_dir(path: Path) -> None:
    """Create ``path`` (mode 0o750) or check the existing one is a writable directory."""
    try:
        path.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise StateDirError(_describe(path, exc)) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise StateDirError(f"state directory {path} is not usable: permission denied")


def _describe(path: Path, exc: OSError) -> str:
    if isinstance(exc, FileExistsError) or exc.errno == errno.ENOTDIR:
        reason = "not a directory"
    elif isinstance(exc, PermissionError):
        reason = "permission denied"
    else:
        reason = (exc.strerror or str(exc)).lower()
    return f"state directory {path} is not usable: {reason}"


def _flock(fd: int) -> int | None:
    """Take an exclusive non-blocking flock on ``fd``; None (``fd`` closed) if held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _release(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _read_pid(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"
