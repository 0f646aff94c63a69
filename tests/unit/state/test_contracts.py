"""A store's read path (worker.state.contracts.ReadPath) and read cache: what the views rely on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.state.contracts import ReadPath
from worker.state.read_cache import ENTRY_BYTES, ReadCache
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store, StoreClosedError

T0 = ("changelog", 0)
ABSENT = object()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "s", RocksDBEnv(4 * MiB), "s")
    yield opened
    opened.close()


def read(path: ReadPath, key: bytes) -> bytes | None:
    """What a view does with a read path (worker/processing/context.py)."""
    value = path.buffered(key, ABSENT)
    if value is ABSENT:
        value = path.cached(key, ABSENT)
        if value is ABSENT:
            value = path.miss(key)
    return value  # type: ignore[return-value]


def test_a_store_hands_out_one_read_path_for_its_whole_life(store: Store) -> None:
    assert store.read_path() is store.read_path()


def test_a_read_path_taken_at_open_reads_what_get_reads_through_every_change(
    store: Store,
) -> None:
    path = store.read_path()
    keys = [b"a", b"b", b"c"]

    def agrees() -> bool:
        return all(read(path, k) == store.get(k) for k in keys)

    store.put(b"a", b"1")
    store.delete(b"b")
    assert path.buffered(b"a", ABSENT) == b"1" and agrees()
    store.commit({T0: 1})
    assert path.buffered(b"a", ABSENT) is ABSENT and path.cached(b"a", ABSENT) == b"1"
    assert agrees()
    store.put(b"c", b"3")
    store.discard_pending()
    assert agrees()
    store.write_restored(store.restore_batch(), {T0: 2})  # clears the read cache
    assert path.cached(b"a", ABSENT) is ABSENT and read(path, b"a") == b"1"
    assert path.cached(b"a", ABSENT) == b"1"  # the miss was remembered
    assert agrees()


def test_after_close_a_read_path_finds_nothing_and_its_miss_raises(store: Store) -> None:
    path = store.read_path()
    store.put(b"a", b"1")
    store.commit({T0: 1})
    store.put(b"b", b"2")

    store.close()

    assert path.buffered(b"b", ABSENT) is ABSENT and path.cached(b"a", ABSENT) is ABSENT
    with pytest.raises(StoreClosedError):
        path.miss(b"a")


class Share:
    def __init__(self, read_cache_share: int) -> None:
        self.read_cache_share = read_cache_share


def test_the_read_cache_counts_an_entry_as_key_value_and_overhead() -> None:
    cache = ReadCache(Share(10 * MiB))

    cache.remember(b"key", b"value")
    cache.remember(b"gone", None)

    assert cache.used_bytes == (3 + 5 + ENTRY_BYTES) + (4 + ENTRY_BYTES)
    assert cache.lookup(b"gone", ABSENT) is None and cache.lookup(b"key", ABSENT) == b"value"


def test_the_read_cache_never_keeps_an_entry_larger_than_its_share() -> None:
    cache = ReadCache(Share(ENTRY_BYTES + 10))

    cache.remember(b"k", b"x" * 20)

    assert len(cache) == 0 and cache.used_bytes == 0


def test_a_full_read_cache_keeps_about_half_its_share_of_the_newest_entries() -> None:
    share = 100 * (8 + ENTRY_BYTES)
    cache = ReadCache(Share(share))
    lookup = cache.lookup

    for i in range(101):
        cache.remember(b"k%03d" % i, b"vvvv")

    assert 0 < cache.used_bytes <= share // 2 + 8 + ENTRY_BYTES
    assert lookup(b"k100", ABSENT) == b"vvvv" and lookup(b"k000", ABSENT) is ABSENT


def test_committed_writes_are_counted_at_the_buffer_mean_size_once_per_new_key() -> None:
    cache = ReadCache(Share(10 * MiB))
    cache.remember(b"a", b"1")

    cache.add_committed({b"a": b"2", b"bb": b"22", b"cc": None}, written_bytes=1 + 1 + 4 + 2)

    assert cache.lookup(b"a", ABSENT) == b"2" and cache.lookup(b"cc", ABSENT) is None
    assert cache.used_bytes == (2 + ENTRY_BYTES) + 2 * (8 // 3 + ENTRY_BYTES)
