"""Deletes confined to the application's state directory: the one way files are removed.

Every delete the worker and its tools make (the wipe of a corrupted task, the cleaner,
``worker state wipe``, a store's scratch checkpoint) goes through :func:`delete_contents`,
:func:`remove_dir` or :func:`remove_tree`, given the directory it must stay inside
(``base``: the application directory, or a store's own) and the path to act on. A symbolic link under ``base``
(a task directory pointing elsewhere, left by hand or planted) must never lead a
recursive delete out of it, so each call follows this protocol:

1. :func:`check_inside`: ``path`` lies lexically under ``base`` (no ``..``), no component
   between them is a symbolic link, and its resolved path lies strictly under the
   resolved ``base``. Otherwise :class:`~worker.errors.UnsafeStatePath`, naming the link.
2. ``base`` is opened, then each component below it with ``O_NOFOLLOW | O_DIRECTORY``
   relative to its parent's descriptor: a component swapped for a link after step 1 is
   refused by the kernel rather than followed.
3. Entries are removed relative to that descriptor (``unlinkat``, and ``shutil.rmtree``
   with ``dir_fd``, which never follows links below it). A link inside the directory is
   removed as a link; its target is left alone.

``base`` itself may be reached through links (a state volume mounted by a link is the
operator's choice); only what lies below it is confined.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path

from worker.errors import UnsafeStatePath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def check_inside(base: Path, path: Path) -> Path:
    """The resolved ``path``, after checking it is strictly under ``base`` with no link.

    Raises:
        UnsafeStatePath: ``path`` is not below ``base``, goes through ``..`` or a symbolic
            link, or resolves outside ``base``.
    """
    parts = _relative_parts(base, path)
    current = base
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise UnsafeStatePath(
                f"{current} is a symbolic link (to {_target(current)}); the worker never follows"
                " links in its state directory: remove the link by hand"
            )
    resolved = Path(os.path.realpath(path))
    if Path(os.path.realpath(base)) not in resolved.parents:
        raise UnsafeStatePath(f"{path} resolves to {resolved}, outside {base}; nothing deleted")
    return resolved


def delete_contents(base: Path, path: Path, keep: Collection[str] = ()) -> None:
    """Delete every entry of the directory ``path`` but the names in ``keep``.

    Raises:
        UnsafeStatePath: as :func:`check_inside`.
        OSError: a file could not be removed (the rest may be gone already).
    """
    with _open_inside(base, path) as fd:
        for entry in os.scandir(fd):
            if entry.name in keep:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.name, dir_fd=fd)
            else:
                os.unlink(entry.name, dir_fd=fd)


def remove_dir(base: Path, path: Path, files: Collection[str] = ()) -> None:
    """Remove the named ``files`` of ``path``, then ``path`` itself, which must be empty.

    Raises:
        UnsafeStatePath: as :func:`check_inside`.
        OSError: ``path`` holds other entries, or a file could not be removed.
    """
    with _open_inside(base, path) as fd:
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
    with _open_parent(base, path) as parent:
        os.rmdir(path.name, dir_fd=parent)


def remove_tree(base: Path, path: Path) -> None:
    """Delete the directory ``path`` and everything under it; nothing if it is missing.

    Raises:
        UnsafeStatePath: as :func:`check_inside` (a link in place of ``path`` included).
        OSError: a file could not be removed.
    """
    if not os.path.lexists(path):
        return
    delete_contents(base, path)
    remove_dir(base, path)


def open_file(base: Path, path: Path, flags: int, mode: int = 0o640) -> int:
    """``os.open`` of the file ``path`` under ``base``, through no link (``path`` neither).

    For the lock files: taking a task's lock must not create a file through a task
    directory swapped for a link. The caller closes the descriptor.

    Raises:
        UnsafeStatePath: as :func:`check_inside`, or ``path`` is itself a link.
    """
    with _open_parent(base, path) as fd:
        try:
            return os.open(path.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeStatePath(f"{path} is a symbolic link; not opened") from None
            raise


def _relative_parts(base: Path, path: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        raise UnsafeStatePath(f"{path} is not inside {base}; nothing deleted") from None
    if not parts or any(part in (".", "..") for part in parts):
        raise UnsafeStatePath(f"{path} is not strictly inside {base}; nothing deleted")
    return parts


@contextlib.contextmanager
def _open(path: Path) -> Iterator[int]:
    fd = os.open(path, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_parent(base: Path, path: Path) -> contextlib.AbstractContextManager[int]:
    _relative_parts(base, path)
    return _open(base) if path.parent == base else _open_inside(base, path.parent)


@contextlib.contextmanager
def _open_inside(base: Path, path: Path) -> Iterator[int]:
    """A descriptor of ``path``, reached from ``base`` without following any link."""
    check_inside(base, path)
    fd = os.open(base, _DIR_FLAGS)
    try:
        current = base
        for part in _relative_parts(base, path):
            current = current / part
            try:
                child = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and current.is_symlink():
                    raise UnsafeStatePath(
                        f"{current} became a symbolic link (to {_target(current)});"
                        " nothing deleted through it"
                    ) from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "?"
