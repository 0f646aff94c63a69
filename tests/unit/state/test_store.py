"""Store: read-your-writes buffer, atomic commit of data with offsets, restore, corruption."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.restoring import restore_pairs
from worker.errors import StateLocked, StoreCorrupted
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.scan import KeyRange
from worker.state.store import Store, StoreClosedError, StoreError

T0 = ("orders-changelog", 0)
T1 = ("orders-changelog", 1)


@pytest.fixture(scope="module")
def env() -> RocksDBEnv:
    return RocksDBEnv(16 * MiB)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "0_1" / "rocksdb" / "counts"


@pytest.fixture
def store(path: Path, env: RocksDBEnv) -> Iterator[Store]:
    opened = Store.open(path, env, "counts")
    yield opened
    opened.close()


def reopen(store: Store, env: RocksDBEnv) -> Store:
    store.close()
    return Store.open(store.path, env, store.name)


def make_store_with_files(path: Path, env: RocksDBEnv, keys: int = 2000) -> None:
    """A closed store whose data sits in SST files (so they can be damaged)."""
    store = Store.open(path, env, "counts")
    for i in range(keys):
        store.put(b"key-%05d" % i, os.urandom(100))
    store.commit({T0: keys})
    store.flush()
    store.close()


def test_open_creates_missing_directories_and_an_empty_store(store: Store, path: Path) -> None:
    assert path.is_dir()
    assert store.name == "counts"
    assert store.path == path
    assert store.committed_offsets() == {}
    assert list(store.iter_committed()) == []
    assert not store.closed


def test_reads_see_their_own_buffered_writes(store: Store) -> None:
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    store.delete(b"b")

    assert store.get(b"a") == b"1"
    assert store.get(b"b") is None
    assert store.get(b"missing") is None


def test_buffered_delete_hides_a_committed_value(store: Store) -> None:
    store.put(b"a", b"1")
    store.commit({T0: 1})

    store.delete(b"a")

    assert store.get(b"a") is None
    assert store.get_committed(b"a") == b"1"


def test_committed_reads_do_not_see_the_buffer(store: Store) -> None:
    store.put(b"a", b"1")

    assert store.get_committed(b"a") is None
    assert list(store.iter_committed()) == []


def test_commit_writes_buffer_and_offsets_and_clears_the_buffer(store: Store) -> None:
    store.put(b"a", b"1")
    store.put(b"b", b"2")

    store.commit({T0: 10})

    assert store.get_committed(b"a") == b"1"
    assert list(store.iter_committed()) == [(b"a", b"1"), (b"b", b"2")]
    assert store.committed_offsets() == {T0: 10}
    assert dict(store.pending()) == {}
    assert store.pending_bytes == 0


def test_committed_data_and_offsets_survive_reopen(store: Store, env: RocksDBEnv) -> None:
    store.put(b"a", b"1")
    store.commit({T0: 10, T1: 3})

    reopened = reopen(store, env)
    try:
        assert reopened.get(b"a") == b"1"
        assert reopened.committed_offsets() == {T0: 10, T1: 3}
    finally:
        reopened.close()


def test_commit_merges_offsets_over_the_stored_ones(store: Store, env: RocksDBEnv) -> None:
    store.commit({T0: 10, T1: 3})

    store.commit({T1: 8})

    assert store.committed_offsets() == {T0: 10, T1: 8}
    reopened = reopen(store, env)
    try:
        assert reopened.committed_offsets() == {T0: 10, T1: 8}
    finally:
        reopened.close()


def test_commit_with_nothing_new_writes_nothing(store: Store) -> None:
    store.put(b"a", b"1")
    store.commit({T0: 10})
    sequence = store._db.latest_sequence_number()  # type: ignore[union-attr]

    store.commit({T0: 10})
    store.commit({})

    assert store._db.latest_sequence_number() == sequence  # type: ignore[union-attr]


def test_commit_of_offsets_alone_is_written(store: Store) -> None:
    store.commit({T0: 4})

    assert store.committed_offsets() == {T0: 4}


def test_committed_offsets_is_a_copy(store: Store) -> None:
    store.commit({T0: 4})

    store.committed_offsets()[T0] = 99

    assert store.committed_offsets() == {T0: 4}


def test_invalid_offset_is_refused_before_anything_is_written(store: Store) -> None:
    store.put(b"a", b"1")

    with pytest.raises(ValueError):
        store.commit({T0: -1})

    assert store.get_committed(b"a") is None
    assert dict(store.pending()) == {b"a": b"1"}


def test_pending_is_a_read_only_view_with_none_for_deletes(store: Store) -> None:
    store.put(b"a", b"1")
    store.delete(b"b")

    view = store.pending()

    assert dict(view) == {b"a": b"1", b"b": None}
    with pytest.raises(TypeError):
        view[b"c"] = b"3"  # type: ignore[index]


def test_pending_bytes_counts_keys_and_latest_values(store: Store) -> None:
    store.put(b"key", b"12345")
    assert store.pending_bytes == 8
    store.put(b"key", b"1")
    assert store.pending_bytes == 4
    store.delete(b"key")
    assert store.pending_bytes == 3
    store.put(b"k2", b"")
    assert store.pending_bytes == 5


def test_discard_pending_drops_the_buffer(store: Store) -> None:
    store.put(b"a", b"1")

    store.discard_pending()

    assert store.get(b"a") is None
    assert store.pending_bytes == 0
    assert dict(store.pending()) == {}


def test_keys_and_values_must_be_bytes(store: Store) -> None:
    with pytest.raises(TypeError):
        store.put("a", b"1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.put(b"a", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.delete(bytearray(b"a"))  # type: ignore[arg-type]


def test_restored_batch_writes_records_deletes_and_offsets(store: Store, env: RocksDBEnv) -> None:
    store.put(b"gone", b"x")
    store.commit({T0: 1})

    restore_pairs(store, [(b"a", b"1"), (b"b", b"2"), (b"gone", None)], {T0: 5})

    assert list(store.iter_committed()) == [(b"a", b"1"), (b"b", b"2")]
    assert store.committed_offsets() == {T0: 5}
    reopened = reopen(store, env)
    try:
        assert list(reopened.iter_committed()) == [(b"a", b"1"), (b"b", b"2")]
        assert reopened.committed_offsets() == {T0: 5}
    finally:
        reopened.close()


def test_restore_is_refused_while_writes_are_buffered(store: Store) -> None:
    store.put(b"a", b"1")

    with pytest.raises(StoreError, match="uncommitted"):
        restore_pairs(store, [(b"b", b"2")], {T0: 1})

    assert store.get_committed(b"b") is None


_CRASH_AFTER_RESTORE_THEN_COMMIT = """
import os, sys
from pathlib import Path
from worker.state.rocksdb_env import RocksDBEnv, MiB
from worker.state.store import Store
store = Store.open(Path(sys.argv[1]), RocksDBEnv(16 * MiB), "counts")
batch = store.restore_batch()
for i in range(1000):
    batch.put(b"restored-%d" % i, b"r")
store.write_restored(batch, {("t", 0): 1000})
store.put(b"processed", b"p")
store.commit({("source-changelog", 0): 7})  # another partition: t 0 must survive too
os._exit(0)  # die without closing: memtables are lost, only files and WAL remain
"""


def test_restored_data_survives_a_crash_after_a_later_commit(path: Path, env: RocksDBEnv) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CRASH_AFTER_RESTORE_THEN_COMMIT), str(path)],
        check=True,
        timeout=60,
    )

    store = Store.open(path, env, "counts")
    try:
        assert store.committed_offsets() == {("t", 0): 1000, ("source-changelog", 0): 7}
        assert store.get_committed(b"processed") == b"p"
        assert store.get_committed(b"restored-0") == b"r"
        assert sum(1 for _ in store.iter_committed()) == 1001
    finally:
        store.close()


def test_iteration_returns_only_data_never_offsets_or_format_record(store: Store) -> None:
    store.put(b"\x00", b"low")
    store.put(b"\xff" * 8, b"high")
    store.commit({T0: 1})
    store.flush()

    assert list(store.iter_committed()) == [(b"\x00", b"low"), (b"\xff" * 8, b"high")]


def test_flush_keeps_data_and_leaves_no_scratch_files(store: Store) -> None:
    restore_pairs(store, [(b"a", b"1")], {T0: 1})

    store.flush()

    assert store.get_committed(b"a") == b"1"
    assert not (store.path / ".atomic-flush").exists()


def test_size_and_key_estimates_are_reported(store: Store) -> None:
    for i in range(100):
        store.put(b"k%d" % i, b"v" * 100)
    store.commit({T0: 100})
    store.flush()

    assert store.approximate_num_keys() > 0
    assert store.disk_size_bytes() > 100 * 100 // 10


def test_close_is_idempotent_and_drops_the_buffer(store: Store, env: RocksDBEnv) -> None:
    store.put(b"a", b"1")

    store.close()
    store.close()

    assert store.closed
    assert store.pending_bytes == 0
    reopened = Store.open(store.path, env, store.name)
    try:
        assert reopened.get(b"a") is None
    finally:
        reopened.close()


def test_using_a_closed_store_raises_store_closed(store: Store) -> None:
    store.close()

    with pytest.raises(StoreClosedError):
        store.get_committed(b"a")
    with pytest.raises(StoreClosedError):
        store.put(b"a", b"1")
    with pytest.raises(StoreClosedError):
        store.delete(b"a")
    with pytest.raises(StoreClosedError):
        store.commit({T0: 1})


def test_close_ends_open_iterators_so_the_store_can_be_reopened(
    store: Store, env: RocksDBEnv
) -> None:
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    store.commit({T0: 1})
    iterator = store.iter_committed()
    next(iterator)

    store.close()

    with pytest.raises(StopIteration):
        next(iterator)
    Store.open(store.path, env, store.name).close()


def test_second_open_of_an_open_store_raises_state_locked(store: Store, env: RocksDBEnv) -> None:
    with pytest.raises(StateLocked, match=str(store.path)):
        Store.open(store.path, env, "counts")


def _garbage_current(path: Path) -> None:
    (path / "CURRENT").write_text("garbage\n")


def _truncate_sst(path: Path) -> None:
    sst = max(path.glob("*.sst"), key=lambda p: p.stat().st_size)
    os.truncate(sst, sst.stat().st_size // 2)


def _delete_sst(path: Path) -> None:
    next(path.glob("*.sst")).unlink()


def _truncate_manifest(path: Path) -> None:
    manifest = next(path.glob("MANIFEST-*"))
    os.truncate(manifest, manifest.stat().st_size // 2)


def _garbage_manifest(path: Path) -> None:
    manifest = next(path.glob("MANIFEST-*"))
    manifest.write_bytes(os.urandom(manifest.stat().st_size))


def _delete_manifest(path: Path) -> None:
    next(path.glob("MANIFEST-*")).unlink()


def _delete_current(path: Path) -> None:
    (path / "CURRENT").unlink()


@pytest.mark.parametrize(
    "damage",
    [
        _garbage_current,
        _delete_current,
        _truncate_sst,
        _delete_sst,
        _truncate_manifest,
        _garbage_manifest,
        _delete_manifest,
    ],
)
def test_damaged_files_are_detected_at_open(path: Path, env: RocksDBEnv, damage: object) -> None:
    make_store_with_files(path, env)
    damage(path)  # type: ignore[operator]

    with pytest.raises(StoreCorrupted) as raised:
        Store.open(path, env, "counts").close()

    assert raised.value.path == str(path)


def test_store_is_usable_again_after_a_failed_open_is_wiped(path: Path, env: RocksDBEnv) -> None:
    make_store_with_files(path, env)
    _garbage_manifest(path)
    with pytest.raises(StoreCorrupted):
        Store.open(path, env, "counts")

    for child in path.iterdir():
        child.unlink()
    store = Store.open(path, env, "counts")
    store.close()


def test_corrupt_block_is_reported_while_iterating(path: Path, env: RocksDBEnv) -> None:
    make_store_with_files(path, env)
    sst = max(path.glob("*.sst"), key=lambda p: p.stat().st_size)
    with sst.open("r+b") as file:
        file.seek(100)
        file.write(os.urandom(2000))
    store = Store.open(path, env, "counts")
    try:
        with pytest.raises(StoreCorrupted, match="checksum"):
            list(store.iter_committed())
    finally:
        store.close()


@pytest.mark.parametrize("reader", ["query", "scan"])
def test_a_store_whose_corrupt_read_error_is_still_alive_can_be_wiped_and_reopened(
    path: Path, env: RocksDBEnv, reader: str
) -> None:
    # A query thread still unwinding its error (or a caller keeping it) while the
    # processing thread heals the task must not keep the database's LOCK.
    make_store_with_files(path, env)
    sst = max(path.glob("*.sst"), key=lambda p: p.stat().st_size)
    with sst.open("r+b") as file:
        file.seek(100)
        file.write(b"\xab" * 2000)
    store = Store.open(path, env, "counts")
    reports: list[str] = []
    store.corruption_found = reports.append
    with pytest.raises((StoreCorrupted, StoreClosedError)) as raised:
        if reader == "query":
            store.read_committed_range(KeyRange())
        else:
            with store.scan() as found:
                list(found)
    kept = raised.value
    store.close()
    for child in path.iterdir():
        child.unlink()

    Store.open(path, env, "counts").close()
    assert "checksum" in str(kept)


def test_unknown_format_version_is_reported_as_corrupted(path: Path, env: RocksDBEnv) -> None:
    import rocksdict  # only to forge a record the store itself would never write

    Store.open(path, env, "counts").close()
    db = rocksdict.Rdict(
        str(path), env.options(), column_families={"offsets": env.offsets_options()}
    )
    db.get_column_family("offsets")[b"format_version"] = (99).to_bytes(8, "big")
    db.close()
    del db

    with pytest.raises(StoreCorrupted, match="unknown format version 99"):
        Store.open(path, env, "counts")


def test_stores_under_one_env_share_its_block_cache(tmp_path: Path) -> None:
    env = RocksDBEnv(8 * MiB)
    stores = [Store.open(tmp_path / f"s{i}", env, f"s{i}") for i in range(3)]
    try:
        for store in stores:
            for i in range(500):
                store.put(b"k%d" % i, b"v" * 200)
            store.commit({T0: 1})
            store.flush()
        before = env.cache_usage_bytes()
        for store in stores:
            for i in range(500):
                store.get_committed(b"k%d" % i)

        assert env.cache_usage_bytes() > before
        assert env.write_buffer_usage_bytes() >= 0
    finally:
        for store in stores:
            store.close()


def test_env_rejects_a_memory_bound_too_small_to_work() -> None:
    with pytest.raises(ValueError):
        RocksDBEnv(1024)


# -- the read cache ----------------------------------------------------------------------


def test_a_value_read_before_a_commit_reads_as_committed_after_it(store: Store) -> None:
    store.put(b"a", b"1")
    store.put(b"b", b"1")
    store.commit({T0: 1})
    assert (store.get(b"a"), store.get(b"b"), store.get(b"new")) == (b"1", b"1", None)

    store.put(b"a", b"2")
    store.delete(b"b")
    store.put(b"new", b"3")
    store.commit({T0: 2})

    assert (store.get(b"a"), store.get(b"b"), store.get(b"new")) == (b"2", None, b"3")
    store.put(b"a", b"uncommitted")
    store.discard_pending()
    assert store.get(b"a") == b"2"


def test_a_failed_commit_leaves_reads_at_the_committed_values(store: Store) -> None:
    store.put(b"a", b"1")
    store.commit({T0: 1})
    assert store.get(b"a") == b"1"

    store.put(b"a", b"2")
    with pytest.raises(ValueError):
        store.commit({T0: -5})  # refused before anything is written
    store.discard_pending()

    assert store.get(b"a") == b"1"


def test_restored_records_replace_values_read_before_them(store: Store) -> None:
    store.put(b"a", b"1")
    store.commit({T0: 1})
    assert (store.get(b"a"), store.get(b"b")) == (b"1", None)

    restore_pairs(store, [(b"a", None), (b"b", b"2")], {T0: 3})

    assert (store.get(b"a"), store.get(b"b")) == (None, b"2")


def test_the_read_cache_stays_within_the_stores_share_of_the_bound(tmp_path: Path) -> None:
    env = RocksDBEnv(4 * MiB, read_cache_ratio=0.125)  # 512 KiB for read caches
    one = Store.open(tmp_path / "one", env, "one")
    two = Store.open(tmp_path / "two", env, "two")
    try:
        assert env.read_cache_share == env.read_cache_bytes // 2
        values = {b"key-%05d" % i: b"%05d" % i * 20 for i in range(5000)}  # ~0.5 MiB
        for key, value in values.items():
            one.put(key, value)
        one.commit({T0: 1})
        one.flush()

        read = {key: one.get(key) for key in values}

        assert read == values
        assert 0 < one.read_cache_bytes <= env.read_cache_share
    finally:
        two.close()
        one.close()
    assert env.read_cache_share == env.read_cache_bytes


def test_a_full_read_cache_keeps_the_values_read_last(tmp_path: Path) -> None:
    env = RocksDBEnv(4 * MiB, read_cache_ratio=0.125)  # one store: a 512 KiB share
    store = Store.open(tmp_path / "one", env, "one")
    try:
        values = {b"key-%05d" % i: b"%05d" % i * 20 for i in range(8000)}  # ~1.7 MiB cached
        for key, value in values.items():
            store.put(key, value)
        store.commit({T0: 1})
        keys = list(values)
        for key in keys:
            store.get(key)

        assert 0 < store.read_cache_bytes <= env.read_cache_share
        cached = store.read_path().cached  # what a read finds without RocksDB
        absent = object()
        assert cached(keys[-1], absent) is not absent and cached(keys[-100], absent) is not absent
        assert cached(keys[0], absent) is absent
    finally:
        store.close()


def test_interactive_reads_see_committed_data_only_whatever_the_owner_reads(store: Store) -> None:
    store.put(b"a", b"1")
    store.commit({T0: 1})
    store.get(b"a")
    store.put(b"a", b"2")

    assert store.get_committed(b"a") == b"1"
    assert store.get(b"a") == b"2"
