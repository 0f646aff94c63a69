"""``worker state list`` and ``worker state wipe``: look at and delete local task state
(``worker state repair``, in :mod:`worker.tools.repair`, shares the group and helpers).

Both work on ``<state-dir>/<application.id>/`` (the application id comes from the same
config layers as ``worker start``: ``--config``, ``WORKER_*``, ``--set``) and use the
worker's own :class:`~worker.state.directory.StateDirectory` and its locks, so they can
never act under a live worker's feet:

- ``list`` is read-only: it never takes a lock and never creates or changes a file. When
  no live process holds the state directory it opens each store read-only and reads the
  offsets committed inside it; while a worker holds it, it reads the ``.checkpoint``
  files instead and says so. With a reachable broker it adds each changelog's end and
  the lag (a short ``--timeout``); ``--no-lag`` skips the broker.
- ``wipe`` refuses (exit 1) while a live process holds the lock. A wiped task's state is
  restored from its changelog the next time this instance is given the task.

Exit codes as for ``worker start``: 0 done, 1 a runtime problem (no such directory, in
use, unknown task), 2 bad usage or configuration.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import click
import orjson

from worker.assignment.task_id import TaskId
from worker.config import Settings, load, parse_assignments
from worker.errors import ConfigError, StateDirError, StateLocked, UnsafeStatePath, WorkerError
from worker.kafka.client_config import check_passthrough
from worker.observability import configure_logging
from worker.state.confined import check_inside, remove_dir
from worker.state.directory import LOCK_FILE, StateDirectory
from worker.tools.inventory import (
    StateInventory,
    directory_bytes,
    inspect,
    lock_holder,
    with_lags,
)


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr and the exit code (shared by the state commands)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def tool_settings(config: Path | None, sets: tuple[str, ...]) -> Settings:
    """The settings as ``worker start`` would load them; exit 2 naming a bad key."""
    try:
        settings = load(config, parse_assignments(list(sets))).settings
        check_passthrough(settings)
    except ConfigError as exc:
        fail(str(exc), 2)
    return settings


def _app_dir(settings: Settings, state_dir: Path | None) -> tuple[Path, Path]:
    """(root, app dir); exits 1 naming what is there when the app dir does not exist."""
    root = state_dir or settings.state_dir
    app_dir = root / settings.application_id
    if not app_dir.is_dir():
        others = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        hint = f"; application directories there: {', '.join(others)}" if others else ""
        fail(
            f"no state for application.id {settings.application_id!r} in {root}{hint}"
            " (set application.id with --config or --set)",
            1,
        )
    return root, app_dir


def _holder_pid(app_dir: Path) -> str:
    try:
        return (app_dir / LOCK_FILE).read_text(encoding="ascii").strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"


config_option = click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path),
    envvar="WORKER_CONFIG",
    help="TOML settings file (for application.id, bootstrap.servers, kafka.*).",
)
set_option = click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a setting; repeatable."
)
state_dir_option = click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="WORKER_STATE_DIR",
    help="The worker's --state-dir (default: state.dir from the settings).",
)


@contextlib.contextmanager
def logs_to_stderr() -> Iterator[None]:
    """Send everything written to file descriptor 1 to stderr meanwhile.

    stdout is the command's output (``--json`` must parse), but loggers that modules
    create at import time, before ``configure_logging``, print to stdout (structlog's
    default). The state directory and stores log through such loggers.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@click.group("state")
def state() -> None:
    """Inspect and wipe the local state of task directories; repair a changelog key."""
    configure_logging("warning", "console")  # on stderr; stdout is the command's output


@state.command("list")
@state_dir_option
@config_option
@set_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option("--no-lag", is_flag=True, help="Do not contact the broker for changelog ends.")
@click.option(
    "--timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds to wait for the broker's changelog ends.",
)
def list_command(
    state_dir: Path | None,
    config: Path | None,
    sets: tuple[str, ...],
    as_json: bool,
    no_lag: bool,
    timeout: float,
) -> None:
    """Task directories with their stores, sizes, stored offsets and lag (read-only)."""
    settings = tool_settings(config, sets)
    root, app_dir = _app_dir(settings, state_dir)
    with logs_to_stderr():
        inventory = _inventory(root, app_dir, settings)
        if not no_lag and inventory.changelog_partitions():
            inventory = _add_lags(inventory, settings, timeout)
    if as_json:
        click.echo(orjson.dumps(inventory.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(_render(inventory))


def _inventory(root: Path, app_dir: Path, settings: Settings) -> StateInventory:
    task_ids = StateDirectory(root, settings.application_id).list_task_ids()  # not opened
    holder = lock_holder(app_dir / LOCK_FILE)
    return inspect(app_dir, task_ids, open_stores=holder is None, in_use_by=holder)


def _add_lags(inventory: StateInventory, settings: Settings, timeout: float) -> StateInventory:
    from worker.kafka.consumers import fetch_high_watermarks  # only when a broker is wanted

    wanted = inventory.changelog_partitions()
    try:
        ends = fetch_high_watermarks(settings, wanted, timeout)
    except WorkerError as exc:
        ends, problem = {}, str(exc)
    else:
        problem = f"no answer within {timeout:g}s"
    if not ends:
        note = f"lag unknown: broker {settings.bootstrap_servers}: {problem}"
        return StateInventory(
            inventory.app_dir,
            inventory.offsets_from,
            inventory.in_use_by,
            inventory.tasks,
            False,
            (*inventory.notes, note),
        )
    return with_lags(inventory, ends)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _render(inv: StateInventory) -> str:
    if inv.in_use_by is not None:
        source = (
            f"in use by pid {inv.in_use_by}, so offsets come from .checkpoint files"
            " (the stores may be further ahead)"
        )
    else:
        source = "not in use; offsets read from the stores"
    total = sum(t.bytes for t in inv.tasks)
    lines = [f"{inv.app_dir}: {len(inv.tasks)} task directories, {_size(total)}; {source}"]
    lines += [f"note: {note}" for note in inv.notes]
    for task in inv.tasks:
        lag = "" if task.lag is None else f"  lag {task.lag}"
        checkpoint = "" if task.has_checkpoint else "  (no .checkpoint)"
        lines.append(f"task {task.task_id}  {_size(task.bytes)}{lag}{checkpoint}")
        if task.error:
            lines.append(f"  error: {task.error}")
        for s in task.stores:
            detail = f"  ~{s.keys} keys" if s.keys is not None else ""
            problem = f"  ({s.error})" if s.error else ""
            lines.append(f"  store {s.name}  {_size(s.bytes)}{detail}{problem}")
        for o in task.offsets:
            end = "" if o.end is None else f"  end {o.end}  lag {o.lag}"
            lines.append(f"  changelog {o.topic}-{o.partition}  offset {o.offset}{end}")
    return "\n".join(lines)


@state.command("wipe")
@state_dir_option
@config_option
@set_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.argument("tasks", nargs=-1, required=True)
def wipe_command(
    state_dir: Path | None,
    config: Path | None,
    sets: tuple[str, ...],
    yes: bool,
    tasks: tuple[str, ...],
) -> None:
    """Delete the local state of task directories; refuses while a worker runs.

    TASKS are task ids such as 0_3. The next time this instance is given a wiped task it restores it from the changelog.
    """
    try:
        task_ids = sorted({TaskId.parse(t) for t in tasks})
    except ValueError as exc:
        fail(f"{exc} (task ids look like 0_3)", 2)
    settings = tool_settings(config, sets)
    root, app_dir = _app_dir(settings, state_dir)
    _require_owner(app_dir)
    directory = StateDirectory(root, settings.application_id)
    try:
        with logs_to_stderr():
            directory.open()
    except StateLocked:
        fail(
            f"refusing to wipe: {app_dir} is in use by a live worker (pid {_holder_pid(app_dir)});"
            " stop it first",
            1,
        )
    except StateDirError as exc:
        fail(str(exc), 1)
    try:
        _wipe(directory, app_dir, task_ids, yes)
    finally:
        with logs_to_stderr():
            directory.close()


def _require_owner(app_dir: Path) -> None:
    """Exit 1 unless this process runs as ``app_dir``'s owner.

    A wipe takes the worker's lock and may create ``.lock`` and ``process.json``: run as
    another user (root, under umask 077) it would leave files the worker cannot open,
    and the worker would then fail at every start.
    """
    owner, me = app_dir.stat().st_uid, os.geteuid()
    if owner != me:
        fail(
            f"refusing to wipe: {app_dir} belongs to uid {owner} and this runs as uid {me};"
            " run it as the worker's user (sudo -u <user> worker state wipe ...)",
            1,
        )


def _wipe(directory: StateDirectory, app_dir: Path, task_ids: list[TaskId], yes: bool) -> None:
    for task_id in task_ids:
        try:
            check_inside(app_dir, app_dir / str(task_id))
        except UnsafeStatePath as exc:
            fail(f"{exc}; nothing wiped", 1)
    present = set(directory.list_task_ids())
    missing = [str(t) for t in task_ids if t not in present]
    if missing:
        fail(f"no task directory {', '.join(missing)} in {app_dir}; nothing wiped", 1)
    names = ", ".join(map(str, task_ids))
    if not yes and not click.confirm(f"Delete the local state of {names} in {app_dir}?"):
        fail("nothing wiped", 1)
    owner = object()
    for task_id in task_ids:
        path = app_dir / str(task_id)
        size = directory_bytes(path)
        if not directory.lock_task(task_id, owner):
            fail(f"task directory {task_id} is locked; nothing more wiped", 1)
        try:
            with logs_to_stderr():
                directory.wipe_task(task_id, owner)
        except UnsafeStatePath as exc:
            fail(f"{exc}; nothing more wiped", 1)
        finally:
            directory.unlock_task(task_id, owner)
        # We hold the process lock: nobody can be about to lock this directory again.
        remove_dir(app_dir, path, files=(LOCK_FILE,))
        click.echo(f"wiped {task_id} ({_size(size)})")
