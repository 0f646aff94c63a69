"""The task `.checkpoint` file: changelog offsets of closed task directories, in Kafka's format.

Stores keep their committed offsets inside RocksDB (see ``store.py``); the `.checkpoint`
file is the copy the process reads for task directories it has not opened, e.g. to report
offset sums in a rebalance without opening every store. It uses Kafka Streams' text
format (version 0) so the layout is familiar to operators::

    0                           format version
    2                           number of entries
    orders-changelog 0 41       <topic> <partition> <offset>, single spaces
    orders-changelog 1 17

Offsets are those of the LAST record applied; restoration resumes at ``offset + 1``.
Files are replaced atomically (write ``<file>.tmp``, fsync, rename, fsync the directory),
so a crash leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from worker.errors import WorkerError
from worker.observability import get_logger

Offsets = dict[tuple[str, int], int]
"""(changelog topic, partition) -> offset of the last record applied."""

VERSION = 0
OFFSET_UNKNOWN = -4  # Kafka's sentinel for "offset not known"; skipped when read.

_log = get_logger(component="checkpoint")


class CheckpointError(WorkerError):
    """A `.checkpoint` file cannot be read or written.

    The caller treats the task's offsets as unknown (for an unopened directory: report no
    offsets; the store's own offsets still win once it is opened).
    """


def read_checkpoint(path: Path) -> Offsets:
    """Read a `.checkpoint` file; a missing file means no offsets.

    Entries with offset -4 (unknown) and other negative offsets are skipped, as Kafka does.

    Raises:
        CheckpointError: unreadable, unknown version, malformed line or wrong entry count;
            the message names the file and, where there is one, the line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read checkpoint file {path}: {exc}") from exc
    return _parse(path, text.splitlines())


def _parse(path: Path, lines: list[str]) -> Offsets:
    def fail(line_no: int, what: str) -> CheckpointError:
        return CheckpointError(f"malformed checkpoint file {path}, line {line_no}: {what}")

    if len(lines) < 2:
        raise fail(len(lines) + 1, "missing version or entry count")
    if lines[0].strip() != str(VERSION):
        raise fail(1, f"unknown version {lines[0].strip()!r}")
    expected = _parse_int(lines[1], lambda: fail(2, f"bad entry count {lines[1]!r}"))
    offsets: Offsets = {}
    skipped = 0
    for line_no, line in enumerate(lines[2:], start=3):
        topic, partition, offset = _parse_entry(line, functools.partial(fail, line_no))
        if (topic, partition) in offsets:
            raise fail(line_no, f"duplicate entry for {topic} {partition}")
        if offset < 0:
            if offset != OFFSET_UNKNOWN:
                _log.warning("checkpoint.negative_offset", path=str(path), line=line_no)
            skipped += 1
            continue
        offsets[(topic, partition)] = offset
    if len(offsets) + skipped != expected:
        raise fail(len(lines), f"expected {expected} entries, found {len(offsets) + skipped}")
    return offsets


def _parse_entry(line: str, fail: Callable[[str], Exception]) -> tuple[str, int, int]:
    parts = line.split()
    if len(parts) != 3:
        raise fail(f"expected '<topic> <partition> <offset>', got {line!r}")
    partition = _parse_int(parts[1], lambda: fail(f"bad partition in {line!r}"))
    offset = _parse_int(parts[2], lambda: fail(f"bad offset in {line!r}"))
    return parts[0], partition, offset


def _parse_int(text: str, error: Callable[[], Exception]) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise error() from None


def write_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Atomically replace ``path`` with ``offsets``; an empty mapping deletes the file.

    Deleting instead of writing an empty file is Kafka's rule: "no file" and "no offsets"
    mean the same, and a reader never has to tell them apart.

    Raises:
        ValueError: an offset is negative (other than -4) or a topic contains whitespace.
        CheckpointError: the file or its directory cannot be written.
    """
    for (topic, _partition), offset in offsets.items():
        if offset < 0 and offset != OFFSET_UNKNOWN:
            raise ValueError(f"refusing to checkpoint negative offset {offset} for {topic}")
        if not topic or any(ch.isspace() for ch in topic):
            raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint file")
    try:
        if not offsets:
            path.unlink(missing_ok=True)
            fsync_directory(path.parent)
            return
        lines = [str(VERSION), str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        replace_file_atomically(path, ("\n".join(lines) + "\n").encode("utf-8"))
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint file {path}: {exc}") from exc


def replace_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    Steps: 1. write ``<path>.tmp``; 2. fsync it; 3. ``os.replace`` onto ``path``;
    4. fsync the directory so the rename itself is durable. Raises OSError.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions inside ``directory`` durable. Raises OSError."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
