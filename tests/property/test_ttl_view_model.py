"""A TTL store through its view equals a model of "last write + ttl > stream time".

Random writes (at record times around stream time, late ones included), deletes, stream
time moving on, sweeps, commits, a discarded buffer and a restore into a fresh store
from what the changelog would hold: after every step ``get`` and ``range`` give exactly
the model's live keys, and after sweeping to the end the store holds no expired key and
no index entry that is due.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.restoring import restore_pairs
from worker.processing.ttl_views import TtlKeyValueStore
from worker.serde import STR
from worker.state import ttl
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.ttl_store import TtlStore, open_store

TTL = 50
KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, st.integers(-80, 20)),  # record time - stream time
        st.tuples(st.just("delete"), KEYS),
        st.tuples(st.just("advance"), st.integers(0, 60)),
        st.tuples(st.just("sweep_commit")),
        st.tuples(st.just("discard")),
        st.tuples(st.just("restore")),
    ),
    max_size=40,
)


class Clock:
    def __init__(self) -> None:
        self.timestamp = 0
        self.stream_time = 0


def live(model: dict[str, tuple[str, int]], now: int) -> dict[str, str]:
    return {k: v for k, (v, expiry) in sorted(model.items()) if expiry > now}


@settings(max_examples=120, deadline=None)
@given(STEPS)
def test_reads_and_scans_match_the_model_through_sweeps_commits_and_restores(
    steps: list[Any],
) -> None:
    clock = Clock()
    committed: dict[str, tuple[str, int]] = {}  # the model at the last commit
    model: dict[str, tuple[str, int]] = {}
    changelog: list[tuple[bytes, bytes | None]] = []
    env = RocksDBEnv(4 * MiB)
    with tempfile.TemporaryDirectory() as directory:
        stores = [open_store(Path(directory) / "0", env, "s", TTL)]
        try:
            for n, step in enumerate(steps):
                store = stores[-1]
                assert isinstance(store, TtlStore)
                view = TtlKeyValueStore("s", store, STR, STR, clock)
                if step[0] == "put":
                    clock.timestamp = max(0, clock.stream_time + step[2])
                    clock.stream_time = max(clock.stream_time, clock.timestamp)
                    view.put(step[1], f"v{n}")
                    model[step[1]] = (f"v{n}", ttl.expires_at(clock.timestamp, TTL))
                elif step[0] == "delete":
                    view.delete(step[1])
                    model.pop(step[1], None)
                elif step[0] == "advance":
                    clock.stream_time += step[1]
                elif step[0] == "sweep_commit":
                    store.sweep(clock.stream_time)
                    changelog.extend(store.pending().items())
                    store.commit({})
                    model = {k: v for k, v in model.items() if v[1] > clock.stream_time}
                    committed = dict(model)
                elif step[0] == "discard":
                    store.discard_pending()
                    model = dict(committed)
                else:  # a new store restored from the changelog, as on another worker
                    store.discard_pending()
                    model = dict(committed)
                    fresh = open_store(Path(directory) / str(n + 1), env, "s", TTL)
                    restore_pairs(fresh, changelog, {("c", 0): len(changelog)})
                    stores.append(fresh)
                    view = TtlKeyValueStore("s", fresh, STR, STR, clock)
                now = clock.stream_time
                assert {k: view.get(k) for k in "abcde" if view.get(k)} == live(model, now)
                with view.range() as found:
                    assert dict(found) == live(model, now)
            final = stores[-1]
            assert isinstance(final, TtlStore)
            while final.sweep(clock.stream_time).more:
                final.commit({})
            final.commit({})
            now = clock.stream_time
            keys = [k for k, _ in final.scan(hi=ttl.RESERVED_PREFIX)]
            assert keys == [k.encode() for k in live(model, now)]  # nothing expired is left
            index = [ttl.parse_index_key(e) for e, _ in final.scan_prefix(ttl.EXPIRY_INDEX_PREFIX)]
            assert all(expiry > now for expiry, _ in index)  # stale entries not due yet only
        finally:
            for store in stores:
                store.close()
