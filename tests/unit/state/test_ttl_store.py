"""TtlStore: reads filtered on stream time, a bounded sweep that tombstones, an index that
stays local (never in pending(), so never in the changelog) and is rebuilt on restore."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.restoring import restore_pairs
from worker.state import ttl
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.scan import KeyRange
from worker.state.store import Store
from worker.state.ttl_store import TtlStore, open_store

TTL = 100
CHANGELOG = ("app-s-changelog", 0)


@pytest.fixture
def env() -> RocksDBEnv:
    return RocksDBEnv(4 * MiB)


@pytest.fixture
def store(tmp_path: Path, env: RocksDBEnv) -> Iterator[TtlStore]:
    opened = open_store(tmp_path / "s", env, "s", TTL)
    assert isinstance(opened, TtlStore)
    yield opened
    opened.close()


def index_of(store: TtlStore) -> list[tuple[int, bytes]]:
    found = store.scan_prefix(ttl.EXPIRY_INDEX_PREFIX)
    return [ttl.parse_index_key(entry) for entry, _ in found]


def test_without_a_ttl_the_store_is_a_plain_store(tmp_path: Path, env: RocksDBEnv) -> None:
    plain = open_store(tmp_path / "p", env, "p")
    assert type(plain) is Store
    plain.close()


def test_a_key_reads_as_absent_once_stream_time_reaches_its_expiry(store: TtlStore) -> None:
    store.put_at(b"k", b"v", write_ms=1000)
    assert store.get_at(b"k", 1099) == b"v"
    assert store.get_at(b"k", 1100) is None
    store.commit({})
    assert store.get_at(b"k", 1099) == b"v" and store.get_at(b"k", 1100) is None


def test_scans_skip_expired_keys_and_the_index_and_count_live_pairs_only(
    store: TtlStore,
) -> None:
    store.put_at(b"a", b"1", write_ms=0)  # expires at 100
    store.put_at(b"b", b"2", write_ms=50)
    store.put_at(b"c", b"3", write_ms=50)
    store.commit({})
    with store.scan_at(None, None, 120, limit=1) as found:
        assert list(found) == [(b"b", b"2")]
    with store.scan_prefix_at(b"", 120, reverse=True) as found:
        assert list(found) == [(b"c", b"3"), (b"b", b"2")]


def test_the_index_never_reaches_pending_and_so_never_the_changelog(store: TtlStore) -> None:
    store.put_at(b"k", b"v", write_ms=5)
    assert dict(store.pending()) == {b"k": ttl.encode(b"v", 105)}
    store.commit({})
    assert index_of(store) == [(105, b"k")]


def test_a_sweep_deletes_expired_keys_in_the_buffer_and_their_index_locally(
    store: TtlStore,
) -> None:
    for n in range(5):
        store.put_at(b"k%d" % n, b"v", write_ms=n * 10)  # expiries 100..140
    store.put_at(b"k0", b"again", write_ms=200)  # rewritten: its first entry is stale
    store.commit({})

    swept = store.sweep(now_ms=125)

    assert (swept.evicted, swept.more) == (2, False)  # k1 (110), k2 (120); k0 was rewritten
    assert dict(store.pending()) == {b"k1": None, b"k2": None}  # tombstones for the changelog
    store.commit({})
    assert index_of(store) == [(130, b"k3"), (140, b"k4"), (300, b"k0")]
    assert store.get_at(b"k0", 125) == b"again"


def test_a_sweep_that_finds_only_stale_entries_still_commits_their_deletes(
    store: TtlStore,
) -> None:
    store.put_at(b"k", b"v", write_ms=0)
    store.put_at(b"k", b"again", write_ms=10)  # the first entry (100) is stale
    store.commit({})

    swept = store.sweep(now_ms=100)
    store.commit({})  # nothing for the changelog, only the index entry to delete

    assert (swept.evicted, swept.examined) == (0, 1)
    assert index_of(store) == [(110, b"k")]


def test_a_sweep_is_bounded_by_its_budget_and_reports_the_backlog(store: TtlStore) -> None:
    keys = ttl.MIN_SWEEP_BUDGET + 10
    for n in range(keys):
        store.put_at(b"%06d" % n, b"v", write_ms=0)
    store.commit({})
    store.sweep(now_ms=0)  # nothing due: resets the writes counted for the budget

    swept = store.sweep(now_ms=1000)

    assert (swept.evicted, swept.more) == (ttl.MIN_SWEEP_BUDGET, True)
    store.commit({})
    assert store.backlog(1000, cap=5) == 5 and store.backlog(1000, cap=100) == 10
    assert store.sweep(now_ms=1000).evicted == 10


def test_a_restore_rebuilds_the_index_and_drops_entries_of_rewritten_or_deleted_keys(
    store: TtlStore,
) -> None:
    restore_pairs(
        store,
        [
            (b"a", ttl.encode(b"1", 150)),
            (b"b", ttl.encode(b"2", 160)),
            (b"a", ttl.encode(b"3", 170)),
        ],
        {CHANGELOG: 2},
    )
    restore_pairs(store, [(b"b", None)], {CHANGELOG: 3})

    assert index_of(store) == [(170, b"a")]
    assert store.stream_time_ms == 170 - TTL  # the newest write restored
    assert store.get_committed(b"a") == b"3"


def test_committed_reads_filter_on_the_latest_stream_time_heard_of(store: TtlStore) -> None:
    store.put_at(b"a", b"1", write_ms=0)
    store.put_at(b"b", b"2", write_ms=60)
    store.commit({})
    assert store.get_committed(b"a") == b"1"
    store.sweep(now_ms=100)  # a is due: deleted in the buffer, but not committed yet
    assert store.get_committed(b"a") is None  # filtered already
    assert store.read_committed_range(KeyRange(None, None), limit=1) == [(b"b", b"2")]
    assert store.get_committed(ttl.EXPIRY_INDEX_PREFIX) is None


def test_reserved_keys_are_refused(store: TtlStore) -> None:
    with pytest.raises(ttl.ReservedKey):
        store.put_at(b"\xffx", b"v", write_ms=0)
    with pytest.raises(ttl.ReservedKey):
        store.remove(b"\xffx")


def test_a_discarded_buffer_forgets_its_index_writes(store: TtlStore) -> None:
    store.put_at(b"k", b"v", write_ms=0)
    store.discard_pending()
    store.commit({})
    assert index_of(store) == []


def test_a_late_write_expiring_before_the_last_swept_entry_is_still_swept(
    store: TtlStore,
) -> None:
    for n in range(3):
        store.put_at(b"k%d" % n, b"v", write_ms=n * 10)
    store.commit({})
    assert store.sweep(now_ms=115).evicted == 2  # k0, k1: the sweep goes on from k1's entry
    store.commit({})
    store.put_at(b"late", b"v", write_ms=0)  # expires at 100, before where the sweep stopped
    assert store.sweep(now_ms=125).evicted == 2  # late and k2
    store.commit({})
    assert index_of(store) == []


def test_after_a_reopen_committed_reads_filter_on_the_stream_time_committed(
    tmp_path: Path, env: RocksDBEnv, store: TtlStore
) -> None:
    store.put_at(b"a", b"1", write_ms=0)
    store.commit({}, stream_time=150)
    store.close()
    reopened = open_store(tmp_path / "s", env, "s", TTL)
    try:
        assert reopened.get_committed(b"a") is None  # expired at 100, before any sweep
    finally:
        reopened.close()
