"""rocksdict's errors translated onto the worker's taxonomy, in exactly one place.

rocksdict raises bare ``Exception`` objects carrying RocksDB's status text; every call
into a database goes through :func:`rocksdb_errors` (or :func:`reraise`), so callers see
errors named by the action they demand: :class:`StoreCorrupted` (wipe and restore),
:class:`StateLocked` (retry), :class:`StoreClosedError` (the store moved on, or is being
healed: :class:`StoreHealing`), or :class:`StoreError` (fatal).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import rocksdict

from worker.errors import FatalError, StateLocked, StoreCorrupted, WorkerError


class StoreError(FatalError):
    """RocksDB failed in a way wiping the store would not fix (disk full, permissions,
    misuse of the API). Fatal for the worker."""


class StoreClosedError(WorkerError):
    """The store was closed (task closed or migrated); an interactive query should retry
    against the new owner."""


class StoreHealing(StoreClosedError):
    """A read from another thread (an interactive query) met a corrupt block: the owning
    task is being closed, wiped and restored. A query answers 503 and is retried, as for
    a closed store."""


def translate(path: Path, exc: BaseException) -> BaseException:
    """Map a rocksdict error onto the taxonomy; anything not from rocksdict passes through.

    rocksdict raises bare ``Exception`` with RocksDB's status string, e.g.
    ``"Corruption: Sst file size mismatch: ..."`` or ``"IO error: While lock file: ...``.
    A file the database references but cannot find is corruption too (deleted SST or
    MANIFEST), as is a column family we do not know (another format).
    """
    if isinstance(exc, rocksdict.DbClosedError):
        return StoreClosedError(f"store {path} is closed")
    if type(exc) is not Exception:
        return exc
    message = " ".join(str(exc).split())
    if (
        message.startswith("Corruption:")
        or "No such file or directory" in message
        or "Column families not opened" in message
    ):
        return StoreCorrupted(str(path), message)
    if message.startswith("IO error") and "lock" in message.lower():
        return StateLocked(f"store {path} is already open in this or another process: {message}")
    if "already closed" in message:
        return StoreClosedError(f"store {path} is closed")
    return StoreError(f"store {path}: {message}")


def reraise(path: Path, exc: BaseException) -> NoReturn:
    """Raise ``exc`` translated (chained to it), or ``exc`` itself if it is not rocksdict's.

    The finished frames of ``exc``'s traceback are cleared first (their lines stay): one
    of them may hold a RocksDB iterator in a local, which pins the database and its LOCK
    for as long as the error lives. A query thread still unwinding a corrupt read would
    otherwise keep the store locked while the processing thread wipes and reopens it.
    """
    traceback.clear_frames(exc.__traceback__)
    translated = translate(path, exc)
    if translated is exc:
        raise exc
    raise translated from exc


@contextlib.contextmanager
def rocksdb_errors(path: Path) -> Iterator[None]:
    """Run the block with rocksdict's errors translated (see :func:`translate`)."""
    try:
        yield
    except Exception as exc:
        reraise(path, exc)
