"""A store's on-disk format: what lives beside the data and how it is checked at open.

Layout of one store::

    default column family   user data, raw bytes keys and values
    "offsets" family        b"<topic> <partition>" -> 8-byte big-endian signed offset
                            b" -1"                 -> the task's stream time (ms) at
                                                      the commit (:data:`STREAM_TIME`)
                            b"format_version"      -> 8-byte big-endian version (1)

Offset keys contain a space and topic names cannot, so the format record can never
collide with an offset. A new store gets its format record at once, synced; a store whose
files existed but whose record is gone is corrupt (RocksDB silently opens a truncated
MANIFEST as an EMPTY database, and the missing record is how that is caught).
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Generator
from pathlib import Path

import rocksdict

from worker.errors import StoreCorrupted
from worker.observability import get_logger
from worker.state.rocksdb_errors import reraise, rocksdb_errors

FORMAT_VERSION = 1
OFFSETS_FAMILY = "offsets"
_FORMAT_KEY = b"format_version"
_INT64 = struct.Struct(">q")
# The stream time's entry among the offsets: topic "" is no topic's name, so it never
# collides with a changelog's; kept where offsets are, it is written in their batch.
STREAM_TIME = ("", -1)
Records = Generator[tuple[bytes, bytes], None, None]

_log = get_logger(component="store")


def offset_key(topic: str, partition: int) -> bytes:
    """The offsets family's key of one changelog partition."""
    return f"{topic} {partition}".encode()


def encode_offset(offset: int) -> bytes:
    """An offset (or the format version) as the offsets family stores it."""
    return _INT64.pack(offset)


def is_db_file(name: str) -> bool:
    """A file RocksDB leaves in a database directory (so the store existed before)."""
    return name.startswith(("CURRENT", "IDENTITY", "MANIFEST-")) or name.endswith((".sst", ".log"))


def scan(db: rocksdict.Rdict, path: Path) -> Records:
    """Iterate a family in key order, checking the cursor status at the end.

    rocksdict's own ``items()`` silently ends early on a checksum error; this raises
    StoreCorrupted instead.
    """
    cursor = None
    try:
        cursor = db.iter()
        cursor.seek_to_first()
        while cursor.valid():
            yield cursor.key(), cursor.value()
            cursor.next()
        cursor.status()
    except Exception as exc:
        reraise(path, exc)
    finally:
        del cursor  # releases the database reference the cursor holds


def load_metadata(db: rocksdict.Rdict, path: Path, existed: bool) -> dict[tuple[str, int], int]:
    """Read the offsets family; check (or, for a new store, write) the format record.

    Raises:
        StoreCorrupted: an unreadable record, an unknown version, or a store that
            ``existed`` without its format record.
    """
    with rocksdb_errors(path):
        # Dropping this family handle flushes that family alone: harmless here, since
        # nothing has been written without the WAL yet.
        entries = list(scan(db.get_column_family(OFFSETS_FAMILY), path))
    version, offsets = _decode_metadata(path, entries)
    if version is None:
        if existed:
            raise StoreCorrupted(
                str(path), "format record missing: files lost or MANIFEST truncated"
            )
        _write_format_record(db, path)
    elif version != FORMAT_VERSION:
        raise StoreCorrupted(str(path), f"unknown format version {version}")
    return offsets


# rocksdict's own file beside RocksDB's, rewritten at every open, read-only ones included.
_ROCKSDICT_CONFIG = "rocksdict-config.json"


def read_only_metadata(
    path: Path, options: rocksdict.Options, offsets_options: rocksdict.Options
) -> tuple[int, dict[tuple[str, int], int]]:
    """A store's estimated key count and committed offsets, read without writing a byte
    under ``path`` (for ``worker state list``, which may run as another user).

    RocksDB's read-only mode writes nothing to the database files, but rocksdict rewrites
    its config file at every open and RocksDB starts an info log there. So the database
    is opened from a scratch directory of links to its files (and a copy of that config),
    with the info log in the scratch directory too; the originals are only read.

    Raises:
        StoreCorrupted: as :func:`load_metadata`.
        StoreError: the files cannot be read (permissions), or vanished meanwhile.
    """
    with tempfile.TemporaryDirectory(prefix="worker-store-") as scratch:
        shadow = Path(scratch) / "db"
        shadow.mkdir()
        with rocksdb_errors(path):
            for entry in path.iterdir():
                if entry.name == _ROCKSDICT_CONFIG:
                    shutil.copyfile(entry, shadow / entry.name)
                elif entry.is_file() and entry.name != "LOCK" and not entry.name.startswith("LOG"):
                    (shadow / entry.name).symlink_to(entry.resolve())
            options.create_if_missing(False)
            options.set_db_log_dir(scratch)
            db = rocksdict.Rdict(
                str(shadow),
                options,
                column_families={OFFSETS_FAMILY: offsets_options},
                access_type=rocksdict.AccessType.read_only(),
            )
        try:
            offsets = load_metadata(db, path, existed=True)
            with rocksdb_errors(path):
                keys = db.property_int_value("rocksdb.estimate-num-keys") or 0
            return keys, offsets
        finally:
            db.close()


def _decode_metadata(
    path: Path, entries: list[tuple[bytes, bytes]]
) -> tuple[int | None, dict[tuple[str, int], int]]:
    version: int | None = None
    offsets: dict[tuple[str, int], int] = {}
    for key, value in entries:
        try:
            number = _INT64.unpack(value)[0]
            if key == _FORMAT_KEY:
                version = number
                continue
            topic, partition = key.decode().split(" ")
            offsets[(topic, int(partition))] = number
        except (struct.error, ValueError, UnicodeDecodeError):
            raise StoreCorrupted(str(path), f"unreadable offsets record {key!r}") from None
    return version, offsets


def _write_format_record(db: rocksdict.Rdict, path: Path) -> None:
    # Synced: a crash right after creation must not leave a store that looks truncated.
    options = rocksdict.WriteOptions()
    options.sync = True
    batch = rocksdict.WriteBatch(raw_mode=True)
    with rocksdb_errors(path):
        family = db.get_column_family_handle(OFFSETS_FAMILY)
        batch.put(_FORMAT_KEY, encode_offset(FORMAT_VERSION), family)
        db.write(batch, options)
        del family
    _log.info("store.created", path=str(path))
