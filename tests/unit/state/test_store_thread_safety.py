"""Store.get_committed from other threads (interactive queries) while the owner closes the store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store, StoreClosedError

T0 = ("counts-changelog", 0)
KEYS = [b"key-%04d" % i for i in range(500)]


@pytest.fixture(scope="module")
def env() -> RocksDBEnv:
    return RocksDBEnv(16 * MiB)


def filled_store(path: Path, env: RocksDBEnv) -> Store:
    store = Store.open(path, env, "counts")
    for key in KEYS:
        store.put(key, key[::-1])
    store.commit({T0: len(KEYS)})
    return store


def race_reads_with_close(store: Store) -> tuple[list[BaseException], int]:
    """Four threads read every key in a loop while this thread closes the store.

    Returns (unexpected errors or wrong values, readers that ended on StoreClosedError).
    """
    problems: list[BaseException] = []
    ended_closed: list[int] = []  # list.append is atomic; a shared counter is not
    started = threading.Barrier(5)

    def reader() -> None:
        started.wait()
        while True:
            for key in KEYS:
                try:
                    value = store.get_committed(key)
                except StoreClosedError:
                    ended_closed.append(1)
                    return
                except BaseException as exc:  # anything else is the bug we look for
                    problems.append(exc)
                    return
                if value != key[::-1]:
                    problems.append(AssertionError(f"{key!r} read as {value!r}"))
                    return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    store.close()
    for thread in threads:
        thread.join(10)
    return problems, len(ended_closed)


def test_reads_racing_a_close_see_committed_values_or_store_closed_and_nothing_else(
    tmp_path: Path, env: RocksDBEnv
) -> None:
    for cycle in range(10):
        store = filled_store(tmp_path / f"s{cycle}", env)
        problems, closed = race_reads_with_close(store)
        assert not problems
        assert closed == 4  # every reader ended on StoreClosedError
        with pytest.raises(StoreClosedError):
            store.get_committed(KEYS[0])


def test_close_waits_for_a_read_in_progress(tmp_path: Path, env: RocksDBEnv) -> None:
    store = filled_store(tmp_path / "s", env)
    closed = threading.Event()
    # Stand in for a read in progress on an HTTP thread: hold the lock get_committed holds.
    store._close_lock.acquire()
    try:
        closer = threading.Thread(target=lambda: (store.close(), closed.set()))
        closer.start()
        assert not closed.wait(0.3), "close went ahead while a read held the store"
        assert not store.closed
    finally:
        store._close_lock.release()
    assert closed.wait(10)
    closer.join(10)
    assert store.closed


def test_the_owner_reads_through_the_buffer_without_taking_the_lock(
    tmp_path: Path, env: RocksDBEnv
) -> None:
    store = filled_store(tmp_path / "s", env)
    try:
        with store._close_lock:  # another thread's read in progress
            assert store.get(KEYS[0]) == KEYS[0][::-1]  # would deadlock if get() locked
            store.put(b"new", b"1")
            assert store.get(b"new") == b"1"
    finally:
        store.close()
