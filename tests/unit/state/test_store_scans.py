"""Store.scan and friends: registered cursors, closed at commit and close, clear errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.processing.store_views import KeyValueStore
from worker.serde import BYTES, JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.scan import KeyRange, ScanRangeError
from worker.state.store import Store


@pytest.fixture
def env() -> RocksDBEnv:
    return RocksDBEnv(4 * MiB)


@pytest.fixture
def store(tmp_path: Path, env: RocksDBEnv) -> Iterator[Store]:
    opened = Store.open(tmp_path / "s", env, "s")
    yield opened
    opened.close()


def fill(store: Store, *keys: bytes) -> None:
    for key in keys:
        store.put(key, b"v" + key)


def test_a_scan_merges_buffered_writes_with_committed_ones(store: Store) -> None:
    fill(store, b"a", b"c", b"e")
    store.commit({})
    fill(store, b"b")
    store.delete(b"c")
    with store.scan(b"a", b"e") as found:
        assert list(found) == [(b"a", b"va"), (b"b", b"vb")]
    with store.scan(reverse=True, limit=2) as found:
        assert list(found) == [(b"e", b"ve"), (b"b", b"vb")]
    with store.scan_prefix(b"e") as found:
        assert list(found) == [(b"e", b"ve")]


def test_open_scans_are_counted_and_closed_at_commit(store: Store, env: RocksDBEnv) -> None:
    fill(store, b"a", b"b")
    store.commit({})
    first, second = store.scan(), store.scan_prefix(b"a")
    assert next(first) == (b"a", b"va")
    assert env.open_scan_count() == 2
    second.close()
    assert env.open_scan_count() == 1
    store.put(b"c", b"3")
    store.commit({})
    assert env.open_scan_count() == 0
    assert first.closed and list(first) == []


def test_closing_the_store_closes_its_scans_so_it_reopens(
    tmp_path: Path, store: Store, env: RocksDBEnv
) -> None:
    fill(store, b"a")
    store.commit({})
    found = store.scan()
    store.close()
    assert found.closed and env.open_scan_count() == 0
    Store.open(tmp_path / "s", env, "s").close()  # the LOCK was released


@pytest.mark.parametrize(
    ("lo", "hi", "limit", "message"),
    [
        (b"b", b"a", None, "is after to"),
        (None, None, -1, "must be an int >= 0"),
        (None, None, True, "must be an int >= 0"),
        ("a", None, None, "must be bytes"),
    ],
)
def test_a_scan_with_bad_bounds_or_limit_is_refused_before_reading(
    store: Store, env: RocksDBEnv, lo: object, hi: object, limit: object, message: str
) -> None:
    with pytest.raises(ScanRangeError, match=message):
        store.scan(lo, hi, limit=limit)  # type: ignore[arg-type]
    assert env.open_scan_count() == 0


def test_committed_range_reads_never_see_the_buffer(store: Store) -> None:
    fill(store, b"a", b"b")
    store.commit({})
    store.put(b"c", b"3")
    store.delete(b"a")
    assert store.read_committed_range(KeyRange(None, None)) == [(b"a", b"va"), (b"b", b"vb")]
    assert store.read_committed_range(KeyRange(b"b", None), reverse=True, limit=5) == [
        (b"b", b"vb")
    ]


def test_a_view_scans_python_keys_in_serialised_byte_order(store: Store) -> None:
    view = KeyValueStore("s", store, STR, JSON, read_only=False)
    for key in ("b", "a", "é", "B", "ab"):
        view.put(key, {"k": key})
    with view.range("B", "b") as found:
        assert [k for k, _ in found] == ["B", "a", "ab"]
    with view.prefix("a", reverse=True) as found:
        assert list(found) == [("ab", {"k": "ab"}), ("a", {"k": "a"})]
    with pytest.raises(ScanRangeError, match="is after to"):
        view.range("b", "a")


def test_a_json_string_prefix_matches_json_strings_that_start_with_it(store: Store) -> None:
    view = KeyValueStore("s", store, JSON, BYTES, read_only=False)
    for key in ("acct-1", "acct-22", "acc", 5, ["acct-1"]):
        view.put(key, b"x")
    with view.prefix("acct-") as found:
        assert [k for k, _ in found] == ["acct-1", "acct-22"]
