"""Windowed stores on real RocksDB: read-your-writes, retention, expiry by range inside the
commit, observed time persisted, restores that skip what expired."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.restoring import restore_pairs
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.scan import ScanRangeError
from worker.state.store import Store
from worker.state.window_format import EXPIRED_UPTO, LAST_EMITTED_CLOSE, OBSERVED_MS
from worker.state.window_store import WindowLayout
from worker.state.window_stores import FixedWindowStore, SessionStore

TP = ("app-w-changelog", 0)
MINUTE = 60_000
# tumbling minute windows kept two minutes: expiry steps of a minute (the floor)
TUMBLING = WindowLayout(segmented=False, retention_ms=2 * MINUTE, size_ms=MINUTE, advance_ms=MINUTE)
SESSIONS = WindowLayout(segmented=True, retention_ms=4 * MINUTE)


@pytest.fixture(scope="module")
def env() -> RocksDBEnv:
    return RocksDBEnv(16 * MiB)


@pytest.fixture
def windows(tmp_path: Path, env: RocksDBEnv) -> Iterator[FixedWindowStore]:
    store = FixedWindowStore.open_windowed(tmp_path / "w", env, "w", TUMBLING)
    yield store
    store.close()


@pytest.fixture
def sessions(tmp_path: Path, env: RocksDBEnv) -> Iterator[SessionStore]:
    store = SessionStore.open_windowed(tmp_path / "s", env, "s", SESSIONS)
    yield store
    store.close()


def values(found: object) -> list[tuple[bytes, int, bytes]]:
    return [(w.key, w.start_ms, w.value) for w in found]  # type: ignore[attr-defined]


def test_reads_see_uncommitted_writes_and_the_committed_ones(windows: FixedWindowStore) -> None:
    windows.put_window(b"a", 0, b"1", 10)
    windows.commit({TP: 0})
    windows.put_window(b"a", MINUTE, b"2", MINUTE + 5)
    windows.put_window(b"b", MINUTE, b"3", MINUTE + 6)
    assert windows.get_window(b"a", 0) == (b"a", 0, MINUTE, 10, b"1")
    assert values(windows.fetch_windows(b"a", 0, MINUTE)) == [(b"a", 0, b"1"), (b"a", MINUTE, b"2")]
    assert values(windows.fetch_all_windows(0, MINUTE)) == [
        (b"a", 0, b"1"),
        (b"a", MINUTE, b"2"),
        (b"b", MINUTE, b"3"),
    ]
    windows.put_window(b"a", 0, None, MINUTE + 7)
    assert values(windows.fetch_all_windows(0, 0)) == []


def test_bounds_are_checked(windows: FixedWindowStore) -> None:
    with pytest.raises(ScanRangeError):
        windows.fetch_windows(b"a", 5, 4)
    with pytest.raises(ValueError, match="not a window start"):
        windows.put_window(b"a", 7, b"x", 7)


def test_expired_windows_read_as_absent_and_writes_to_them_are_dropped(
    windows: FixedWindowStore,
) -> None:
    windows.put_window(b"a", 0, b"old", 5)
    windows.put_window(b"a", 3 * MINUTE, b"new", 3 * MINUTE)  # observed 3 min: live from 1 min
    assert windows.get_window(b"a", 0) is None
    assert values(windows.fetch_windows(b"a", 0, 10 * MINUTE)) == [(b"a", 3 * MINUTE, b"new")]
    assert windows.put_window(b"b", 0, b"late", 3 * MINUTE) is False
    assert windows.dropped_writes == 1


def test_expiry_is_one_range_delete_in_the_commit_and_no_changelog_record(
    windows: FixedWindowStore,
) -> None:
    for minute in range(3):
        windows.put_window(b"k%d" % minute, minute * MINUTE, b"v", minute * MINUTE)
    windows.commit({TP: 2})
    windows.put_window(b"z", 5 * MINUTE, b"v", 5 * MINUTE)  # cutoff 3 min: starts < 3 min go
    assert windows.expiry_ranges == 1
    pending = dict(windows.pending())
    assert not any(k[:8] < (3 * MINUTE).to_bytes(8, "big") for k in pending if k[0] != 0xFF)
    assert EXPIRED_UPTO in pending and OBSERVED_MS in pending
    windows.commit({TP: 3})
    committed = [k for k, _ in windows.iter_committed() if k[0] != 0xFF]
    assert committed == [(5 * MINUTE).to_bytes(8, "big") + b"z"]


def test_observed_time_survives_a_reopen(tmp_path: Path, env: RocksDBEnv) -> None:
    store = FixedWindowStore.open_windowed(tmp_path / "w", env, "w", TUMBLING)
    store.put_window(b"a", 4 * MINUTE, b"v", 4 * MINUTE + 1)
    store.commit({TP: 0})
    store.close()
    again = FixedWindowStore.open_windowed(tmp_path / "w", env, "w", TUMBLING)
    try:
        assert again.observed_ms == 4 * MINUTE + 1
        assert again.put_window(b"a", MINUTE, b"late", 0) is False
    finally:
        again.close()


def test_discarding_uncommitted_writes_forgets_their_observed_time(
    windows: FixedWindowStore,
) -> None:
    windows.put_window(b"a", 0, b"v", 10)
    windows.commit({TP: 0})
    windows.put_window(b"a", 9 * MINUTE, b"v", 9 * MINUTE)
    windows.discard_pending()
    assert windows.observed_ms == 10
    assert windows.get_window(b"a", 0) is not None


def test_a_restore_skips_expired_records_judged_by_the_batch_observed_time(
    windows: FixedWindowStore,
) -> None:
    records = [
        ((m * MINUTE).to_bytes(8, "big") + b"k", (m * MINUTE).to_bytes(8, "big") + b"v")
        for m in range(10)
    ]
    records.append((OBSERVED_MS, (9 * MINUTE).to_bytes(8, "big")))
    restore_pairs(windows, records, {TP: 10})
    kept = [k for k, _ in windows.iter_committed() if k[0] != 0xFF]
    assert len(kept) == 3  # starts 7, 8, 9 min: live from 9 - 2 = 7 min
    assert windows.restore_skipped == 7
    assert windows.observed_ms == 9 * MINUTE
    assert windows.committed_offsets() == {TP: 10}


def test_emit_final_stores_keep_windows_until_emitted(tmp_path: Path, env: RocksDBEnv) -> None:
    layout = WindowLayout(False, 2 * MINUTE, MINUTE, MINUTE, hold_until_emitted=True)
    store = FixedWindowStore.open_windowed(tmp_path / "f", env, "f", layout)
    try:
        store.put_window(b"a", 0, b"v", 0)
        store.put_window(b"a", 9 * MINUTE, b"v", 9 * MINUTE)
        assert store.expiry_ranges == 0
        assert [w.start_ms for w in store.fetch_all_windows(0, 0, live_only=False)] == [0]
        store.mark_emitted(8 * MINUTE)
        assert store.expiry_ranges == 1
        store.commit({TP: 1})
        assert [w.start_ms for w in store.fetch_all_windows(0, 9 * MINUTE, live_only=False)] == [
            9 * MINUTE
        ]
    finally:
        store.close()


def test_committed_windows_filter_uncommitted_and_expired(windows: FixedWindowStore) -> None:
    windows.put_window(b"a", 0, b"1", 0)
    windows.put_window(b"a", MINUTE, b"2", MINUTE)
    windows.commit({TP: 0})
    windows.put_window(b"a", 2 * MINUTE, b"3", 2 * MINUTE)
    observed, found = windows.committed_windows(b"a", 0, 10 * MINUTE, None)
    assert observed == MINUTE and values(found) == [(b"a", 0, b"1"), (b"a", MINUTE, b"2")]
    windows.commit({TP: 1})
    observed, found = windows.committed_windows(None, 0, 10 * MINUTE, 1)
    assert observed == 2 * MINUTE and values(found) == [(b"a", 0, b"1")]


def test_sessions_are_found_by_reach_and_removed(sessions: SessionStore) -> None:
    sessions.put_session(b"u", 0, 10, b"s1", 10)
    sessions.put_session(b"u", 100, 150, b"s2", 150)
    sessions.put_session(b"u\x00x", 5, 5, b"other", 150)
    sessions.commit({TP: 0})
    found = sessions.find_sessions(b"u", 5, 120)
    assert [(s.start_ms, s.end_ms, s.value) for s in found] == [(0, 10, b"s1"), (100, 150, b"s2")]
    sessions.remove_session(b"u", 0, 10)
    assert [s.value for s in sessions.find_sessions(b"u", 0, 200)] == [b"s2"]
    assert sorted(s.value for s in sessions.fetch_all_sessions(0, 200)) == [b"other", b"s2"]
    observed, found = sessions.committed_sessions(b"u", 0, 200, None)
    assert observed == 150 and [s.value for s in found] == [b"s1", b"s2"]


def test_a_session_cannot_end_after_the_latest_write(sessions: SessionStore) -> None:
    with pytest.raises(ValueError, match="after the latest write time"):
        sessions.put_session(b"u", 0, 20, b"s", 10)


def test_sliding_windows_may_end_after_the_latest_write(tmp_path: Path, env: RocksDBEnv) -> None:
    layout = WindowLayout(segmented=True, retention_ms=4 * MINUTE, max_ahead_ms=1001)
    store = SessionStore.open_windowed(tmp_path / "sl", env, "sl", layout)
    try:
        store.put_session(b"k", 501, 1501, b"right", 500)  # the right window of a record at 500
        assert [s.value for s in store.find_sessions(b"k", 1000, 1000)] == [b"right"]
        with pytest.raises(ValueError, match="after the latest write time"):
            store.put_session(b"k", 600, 1502, b"too far", 500)
    finally:
        store.close()


def test_a_range_delete_goes_first_in_the_commit_batch(tmp_path: Path, env: RocksDBEnv) -> None:
    """Store.delete_range: buffered writes in range before it are dropped, writes after it
    survive, reads cached from the range are forgotten at commit, nothing reaches the
    pending (changelog) entries."""
    store = Store.open(tmp_path / "plain", env, "plain")
    try:
        for key in (b"a", b"b", b"c", b"d"):
            store.put(key, b"old")
        store.commit({TP: 0})
        assert store.get(b"b") == b"old"  # now in the read cache
        store.put(b"c", b"buffered")
        store.delete_range(b"b", b"d")
        assert b"c" not in store.pending() and b"c" not in store.pending_times()
        store.put(b"c", b"after")
        store.commit({TP: 1})
        assert dict(store.iter_committed()) == {b"a": b"old", b"c": b"after", b"d": b"old"}
        assert store.get(b"b") is None
    finally:
        store.close()


def test_a_read_for_update_finds_windows_committed_restored_or_on_disk_at_open(
    tmp_path: Path, env: RocksDBEnv
) -> None:
    """``stored_window`` skips RocksDB for windows newer than every start on disk: each
    way a window reaches the disk raises that bound."""
    store = FixedWindowStore.open_windowed(tmp_path / "w", env, "w", TUMBLING)
    key = FixedWindowStore.window_key
    assert store.stored_window(key(0, b"a"), 0) is None
    store.put_stored(key(0, b"a"), 0, 5, b"1", 5)
    store.commit({TP: 0})
    assert store.stored_window(key(0, b"a"), 0) == FixedWindowStore.window_key(5, b"1")
    restore_pairs(store, [(key(MINUTE, b"b"), key(MINUTE + 1, b"2"))], {TP: 1})
    assert store.stored_window(key(MINUTE, b"b"), MINUTE) == key(MINUTE + 1, b"2")
    store.close()
    again = FixedWindowStore.open_windowed(tmp_path / "w", env, "w", TUMBLING)
    assert again.stored_window(key(MINUTE, b"b"), MINUTE) == key(MINUTE + 1, b"2")
    assert again.stored_window(key(2 * MINUTE, b"b"), 2 * MINUTE) is None
    again.close()


def test_the_commit_of_an_expiry_compacts_the_expired_files_away(
    windows: FixedWindowStore,
) -> None:
    for minute in range(3):
        for key in range(50):
            windows.put_window(b"k%d" % key, minute * MINUTE, b"v" * 100, minute * MINUTE)
        windows.commit({TP: minute})
        windows.flush()  # a file per minute, as RocksDB would have after a while
    windows.put_window(b"z", 6 * MINUTE, b"v", 6 * MINUTE)  # cutoff 4 min: all three go
    windows.commit({TP: 3})
    db = windows._require_open()
    windows_files = [f for f in db.live_files() if f["start_key"][:1] == b"\x00"]  # times
    assert windows_files == [] or min(f["start_key"] for f in windows_files) >= (
        6 * MINUTE
    ).to_bytes(8, "big")
    assert [k for k, _ in windows.iter_committed() if k[0] != 0xFF] == [
        (6 * MINUTE).to_bytes(8, "big") + b"z"
    ]


def minute_records(minutes: range, keys: bytes = b"k") -> list[tuple[bytes, bytes | None]]:
    """A changelog in time order as its active committed it: each minute one window per
    key, then the observed time."""
    records: list[tuple[bytes, bytes | None]] = []
    for m in minutes:
        stamp = (m * MINUTE).to_bytes(8, "big")
        records += [(stamp + bytes([key]), stamp + b"v") for key in keys]
        records.append((OBSERVED_MS, stamp))
    return records


def test_a_restore_told_the_changelog_tail_writes_only_the_windows_live_at_its_end(
    windows: FixedWindowStore,
) -> None:
    history = minute_records(range(30), b"ab")
    windows.learn_changelog_tail(history[-5:])
    for batch in range(0, len(history), 9):  # batches of 3 minutes: nothing expired within
        restore_pairs(windows, history[batch : batch + 9], {TP: batch + 8})
    on_disk = [k for k, _ in windows.iter_committed() if k[0] != 0xFF]
    # live from 29 - 2 = 27 min: starts 27, 28, 29 for both keys; none other ever written
    starts = [(m * MINUTE).to_bytes(8, "big") for m in (27, 28, 29)]
    assert on_disk == [start + key for start in starts for key in (b"a", b"b")]
    assert windows.restore_skipped == 2 * 27
    assert windows.observed_ms == 29 * MINUTE


def test_a_late_update_within_grace_to_an_older_window_survives_the_restore(
    windows: FixedWindowStore,
) -> None:
    seven = (7 * MINUTE).to_bytes(8, "big")
    history = minute_records(range(10))
    history.append((seven + b"k", seven + b"late"))  # after observed 9 min: 7 is still live
    windows.learn_changelog_tail(history[-3:])
    for batch in range(0, len(history), 4):
        restore_pairs(windows, history[batch : batch + 4], {TP: batch + 3})
    found = windows.get_window(b"k", 7 * MINUTE)
    assert found is not None and found.value == b"late"
    assert [w.start_ms for w in windows.fetch_all_windows(0, 10 * MINUTE)] == [
        m * MINUTE for m in (7, 8, 9)
    ]
    assert windows.restore_skipped == 7


def test_a_changelog_tail_never_lowers_what_the_store_skips_by(windows: FixedWindowStore) -> None:
    windows.learn_changelog_tail(minute_records(range(9, 10)))
    windows.learn_changelog_tail(minute_records(range(3, 4)))  # an older tail: no effect
    restore_pairs(windows, minute_records(range(5)), {TP: 9})
    assert windows.restore_skipped == 5  # 0..4 all below 9 - 2


def test_an_emit_final_store_told_only_the_observed_time_skips_nothing_unemitted(
    tmp_path: Path, env: RocksDBEnv
) -> None:
    layout = WindowLayout(False, 2 * MINUTE, MINUTE, MINUTE, hold_until_emitted=True)
    store = FixedWindowStore.open_windowed(tmp_path / "f", env, "f", layout)
    try:
        history = minute_records(range(10))
        store.learn_changelog_tail(history[-2:])
        restore_pairs(store, history, {TP: 19})
        assert store.restore_skipped == 0
        emitted = (LAST_EMITTED_CLOSE, (5 * MINUTE).to_bytes(8, "big"))
        store.learn_changelog_tail([emitted])
        restore_pairs(store, minute_records(range(10, 11)), {TP: 21})
        assert store.restore_skipped == 0  # minute 10 is live
        restore_pairs(store, minute_records(range(4, 6)), {TP: 25})  # a replay, say
        assert store.restore_skipped == 1  # minute 4 was emitted and expired, 5 was not
    finally:
        store.close()
