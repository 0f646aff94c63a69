"""The shared RocksDB env keeps the memtables of every store within its write-buffer budget."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from worker.state.rocksdb_env import MiB, RocksDBEnv, flush_order
from worker.state.store import Store

T0 = ("counts-changelog", 0)


@dataclass(eq=False)
class Holder:
    name: str
    size: int

    def memtable_bytes(self) -> int:
        return self.size

    def flush_memtable(self, wait: bool) -> bool:
        self.size = 0
        return True


def test_flush_order_takes_the_largest_memtables_first_and_never_empty_ones() -> None:
    small, empty, large, middle = Holder("s", 10), Holder("e", 0), Holder("l", 30), Holder("m", 20)

    order = flush_order((h.size, h) for h in (small, empty, large, middle))

    assert [h.name for h in order] == ["l", "m", "s"]


def test_memtables_of_many_stores_written_in_turn_stay_within_the_budget(tmp_path: Path) -> None:
    # 4 MiB bound: a 1 MiB budget; each store's memtable may grow to 512 KiB on its own,
    # so sixteen stores holding 200 KiB each would pass the budget three times over.
    env = RocksDBEnv(4 * MiB)
    stores = [Store.open(tmp_path / f"s{i}", env, f"s{i}") for i in range(16)]
    try:
        for round_ in range(1, 4):
            for store in stores:
                for i in range(200):
                    store.put(b"%s-%d-%d" % (store.name.encode(), round_, i), os.urandom(1000))
                store.commit({T0: round_})

                assert env.write_buffer_usage_bytes() <= env.write_buffer_bytes

        # 9.6 MB written within a 1 MiB budget: the env flushed memtables to SSTs, in the
        # background or waiting for them (how many it waited for depends on the machine's
        # load: a run where the background flushes kept up waited for none).
        assert any(tmp_path.rglob("*.sst")), "memtables flushed to SSTs"
        assert all(store.get(b"%s-1-0" % store.name.encode()) is not None for store in stores)
    finally:
        for store in stores:
            store.close()


def test_a_closed_store_is_no_longer_flushed_nor_given_a_read_cache_share(
    tmp_path: Path,
) -> None:
    env = RocksDBEnv(4 * MiB)
    one = Store.open(tmp_path / "one", env, "one")
    two = Store.open(tmp_path / "two", env, "two")
    two.close()
    two.close()  # idempotent, counted once

    assert env.read_cache_share == env.read_cache_bytes
    try:
        for i in range(3000):
            one.put(b"k%d" % i, os.urandom(1000))
        one.commit({T0: 1})  # ~3 MiB: past the budget at once, and only `one` can be flushed

        assert env.forced_flushes == 1
        assert env.write_buffer_usage_bytes() <= env.write_buffer_bytes // 2
    finally:
        one.close()


def test_a_store_reports_its_memtable_and_flushing_it_keeps_the_data(tmp_path: Path) -> None:
    env = RocksDBEnv(64 * MiB)
    store = Store.open(tmp_path / "s", env, "s")
    try:
        store.put(b"a", b"1" * 1000)
        store.commit({T0: 1})
        assert store.memtable_bytes() > 0

        assert store.flush_memtable(wait=True)

        assert store.memtable_bytes() < 4096  # an empty memtable's own blocks
        assert store.get_committed(b"a") == b"1" * 1000
        assert store.committed_offsets() == {T0: 1}
    finally:
        store.close()
    assert not store.flush_memtable(wait=True)  # closed: nothing to do, nothing raised
