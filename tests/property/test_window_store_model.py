"""The windowed stores on real RocksDB against a dict model: writes, reads, expiry, commits
and restores from the changelog the commits wrote.

At every step each read (``get``, ``fetch``, ``fetch_all``, ``find_sessions`` and the
committed reads of interactive queries) equals the model's live windows (time at or above
observed - retention); after each commit RocksDB holds nothing below the expiry step; and
a store restored from the changelog (in batches of any size) reads the same as the
original and holds no window the original expired.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.restoring import restore_pairs
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.window_format import decode_fixed_key, decode_segmented_key, is_meta_key
from worker.state.window_store import WindowedStore, WindowLayout
from worker.state.window_stores import FixedWindowStore, SessionStore

TP = ("w-changelog", 0)
STEP = 60_000  # segment_interval's floor: retention under 2 minutes steps by a minute
ENV = RocksDBEnv(16 * MiB)

keys = st.sampled_from([b"a", b"a\x00", b"b", b"\x00"])
times = st.integers(min_value=0, max_value=6 * STEP)
# ("put", key, window index, value or None, time advance) | ("commit",) | ("read", lo, hi)
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            keys,
            st.integers(0, 12),
            st.one_of(st.none(), st.binary(max_size=3)),
            st.integers(-STEP, STEP),
        ),
        st.tuples(st.just("commit")),
        st.tuples(st.just("read"), times, times),
    ),
    max_size=60,
)


class Model:
    """Windows by (key, start) or (key, start, end), an observed time, a retention."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self.observed = -1
        self.windows: dict[tuple[Any, ...], bytes] = {}

    def write(self, ident: tuple[Any, ...], time: int, value: bytes | None, ts: int) -> bool:
        self.observed = max(self.observed, ts)
        if time < self.observed - self.retention:
            return False
        if value is None:
            self.windows.pop(ident, None)
        else:
            self.windows[ident] = value
        return True

    def live(self, time: int) -> bool:
        return time >= self.observed - self.retention


def on_disk(store: WindowedStore) -> list[bytes]:
    return [k for k, _ in store.iter_committed() if not is_meta_key(k)]


def restored_copy(
    root: Path,
    store_kind: type[WindowedStore],
    layout: WindowLayout,
    changelog: list[tuple[bytes, bytes | None]],
    batch: int,
) -> WindowedStore:
    copy = store_kind.open_windowed(root / "copy", ENV, "copy", layout)
    for offset in range(0, len(changelog), batch):
        chunk = changelog[offset : offset + batch]
        restore_pairs(copy, chunk, {TP: offset + len(chunk) - 1})
    return copy


@settings(max_examples=60, deadline=None)
@given(
    size_windows=st.integers(1, 3),
    advance=st.sampled_from([10_000, 30_000]),
    extra=st.integers(0, STEP),
    script=ops,
    batch=st.integers(1, 7),
)
def test_fixed_window_store_matches_the_model(
    size_windows: int, advance: int, extra: int, script: list[Any], batch: int
) -> None:
    size = size_windows * advance
    layout = WindowLayout(False, size + extra, size, advance)
    model = Model(layout.retention_ms)
    changelog: list[tuple[bytes, bytes | None]] = []
    now = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = FixedWindowStore.open_windowed(Path(tmp) / "w", ENV, "w", layout)
        try:
            for op in script:
                if op[0] == "put":
                    _, key, index, value, step = op
                    now = max(0, now + step)
                    start = max(0, now // advance - index) * advance
                    expected = model.write((key, start), start, value, now)
                    assert store.put_window(key, start, value, now) is expected
                elif op[0] == "commit":
                    changelog.extend(store.pending().items())
                    store.commit({TP: len(changelog)})
                    assert all(decode_fixed_key(k)[0] >= store.expired_upto for k in on_disk(store))
                else:
                    lo, hi = sorted(op[1:])
                    live = sorted(
                        (start, key, v)
                        for (key, start), v in model.windows.items()
                        if model.live(start) and lo <= start <= hi
                    )
                    got = [(w.start_ms, w.key, w.value) for w in store.fetch_all_windows(lo, hi)]
                    assert got == live
                    for key in {k for _s, k, _v in live}:
                        mine = [(s, k, v) for s, k, v in live if k == key]
                        fetched = store.fetch_windows(key, lo, hi)
                        assert [(w.start_ms, w.key, w.value) for w in fetched] == mine
                        assert store.get_window(key, mine[0][0]).value == mine[0][2]  # type: ignore[union-attr]
            changelog.extend(store.pending().items())
            store.commit({TP: len(changelog)})
            _observed, committed = store.committed_windows(None, 0, 10 * STEP, None)
            expected_all = sorted((s, k, v) for (k, s), v in model.windows.items() if model.live(s))
            assert [(w.start_ms, w.key, w.value) for w in committed] == expected_all
            copy = restored_copy(Path(tmp), FixedWindowStore, layout, changelog, batch)
            try:
                assert copy.observed_ms == store.observed_ms
                again = [(w.start_ms, w.key, w.value) for w in copy.fetch_all_windows(0, 10 * STEP)]
                assert again == expected_all
                cutoff = store.observed_ms - layout.retention_ms
                assert all(
                    decode_fixed_key(k)[0] >= min(cutoff, copy.expired_upto) for k in on_disk(copy)
                )
            finally:
                copy.close()
        finally:
            store.close()


@settings(max_examples=60, deadline=None)
@given(extra=st.integers(0, STEP), script=ops, batch=st.integers(1, 7))
def test_session_store_matches_the_model(extra: int, script: list[Any], batch: int) -> None:
    layout = WindowLayout(True, 20_000 + extra)
    model = Model(layout.retention_ms)
    changelog: list[tuple[bytes, bytes | None]] = []
    now = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore.open_windowed(Path(tmp) / "s", ENV, "s", layout)
        try:
            for op in script:
                if op[0] == "put":
                    _, key, index, value, step = op
                    now = max(0, now + step)
                    end = max(0, now - index * 5_000)
                    start = max(0, end - 3_000)
                    if value is None:
                        model.observed = max(model.observed, now)
                        store.advance(now)
                        model.windows.pop((key, start, end), None)
                        store.remove_session(key, start, end)
                        continue
                    expected = model.write((key, start, end), end, value, now)
                    assert store.put_session(key, start, end, value, now) is expected
                elif op[0] == "commit":
                    changelog.extend(store.pending().items())
                    store.commit({TP: len(changelog)})
                    bound = store.expired_upto // layout.interval_ms
                    assert all(int.from_bytes(k[:8], "big") >= bound for k in on_disk(store))
                else:
                    lo, hi = sorted(op[1:])
                    for key in {k for k, *_ in model.windows}:
                        live = sorted(
                            (e, s, v)
                            for (k, s, e), v in model.windows.items()
                            if k == key and model.live(e) and e >= lo and s <= hi
                        )
                        found = store.find_sessions(key, lo, hi)
                        assert [(w.end_ms, w.start_ms, w.value) for w in found] == live
            changelog.extend(store.pending().items())
            store.commit({TP: len(changelog)})
            copy = restored_copy(Path(tmp), SessionStore, layout, changelog, batch)
            try:
                for key in {k for k, *_ in model.windows}:
                    live = sorted(
                        (e, s, v)
                        for (k, s, e), v in model.windows.items()
                        if k == key and model.live(e)
                    )
                    for reader in (store, copy):
                        found = reader.find_sessions(key, 0, 10 * STEP)  # type: ignore[attr-defined]
                        assert [(w.end_ms, w.start_ms, w.value) for w in found] == live
                    _observed, committed = store.committed_sessions(key, 0, 10 * STEP, None)
                    assert [(w.end_ms, w.start_ms, w.value) for w in committed] == live
                cutoff = store.observed_ms - layout.retention_ms
                assert all(
                    decode_segmented_key(k)[2] >= cutoff
                    or int.from_bytes(k[:8], "big") >= copy.expired_upto // layout.interval_ms
                    for k in on_disk(copy)
                )
            finally:
                copy.close()
        finally:
            store.close()


def test_the_model_scripts_cover_expiry() -> None:
    """A guard on the strategy: a script long enough expires something."""
    layout = WindowLayout(False, 20_000, 10_000, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        store = FixedWindowStore.open_windowed(Path(tmp) / "w", ENV, "w", layout)
        try:
            for now in itertools.islice(itertools.count(0, 10_000), 20):
                store.put_window(b"k", now, b"v", now)
                store.commit({TP: now})
            assert store.expiry_ranges > 0
            assert len(on_disk(store)) <= (20_000 + STEP) // 10_000 + 1
        finally:
            store.close()
