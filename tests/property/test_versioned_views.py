"""The versioned view's as-of read (a stream-table join's lookup) is the plain path's.

``VersionedKeyValueStore.get_as_of`` inlines the serdes' C functions and reads the raw
store's ``value_as_of`` (the newest version from its header's flag when the read is as
of the observed time or later), where the plain path is ``serde.serialize`` ->
``VersionedStore.get_as_of`` (the whole version) -> ``serde.deserialize``. Both are run
at times around every version written, for every serde pair of the key-value views'
test, over writes (values, tombstones, out of order), commits and cleared read caches,
so reads come from the write buffer, the read cache and RocksDB. Errors must match too.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.test_store_views import PAIRS, VALUES, outcome, stored_key
from worker.processing.versioned_views import VersionedKeyValueStore
from worker.serde import Serde
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.versioned_store import VersionedStore

TP = ("changelog", 0)
HISTORY_MS = 20


def plain_as_of(store: VersionedStore, kser: Serde, vser: Serde, key: Any, at: int) -> Any:
    found = store.get_as_of(stored_key(kser, key), at)
    return None if found is None else vser.deserialize(found.value)


def steps(kser: Serde, vser: Serde) -> st.SearchStrategy[list[Any]]:
    keys = VALUES[kser.name].filter(lambda k: k is not None)
    values = st.none() | VALUES[vser.name]
    return st.lists(keys, min_size=1, max_size=3, unique_by=repr).flatmap(
        lambda pool: st.lists(
            st.one_of(
                st.tuples(st.just("put"), st.sampled_from(pool), values, st.integers(0, 40)),
                st.tuples(st.just("commit"), st.booleans()),
            ),
            max_size=20,
        ).map(lambda script: (pool, script))
    )


@pytest.mark.parametrize(("kser", "vser"), PAIRS, ids=lambda s: s.name)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_views_as_of_read_is_the_serdes_over_the_stores_plain_read(
    kser: Serde, vser: Serde, data: st.DataObject
) -> None:
    pool, script = data.draw(steps(kser, vser))
    with tempfile.TemporaryDirectory() as directory:
        store = VersionedStore.open_versioned(
            Path(directory) / "v", RocksDBEnv(4 * MiB), "v", HISTORY_MS
        )
        view = VersionedKeyValueStore("v", store, kser, vser, lambda: 0)
        times: set[int] = {0}
        try:
            for step in script:
                if step[0] == "put":
                    _, key, value, ts = step
                    outcome(partial(view.put, key, value, ts))  # a refused value: no write
                    times.add(ts)
                else:
                    store.commit({TP: store.committed_offsets().get(TP, 0) + 1})
                    if step[1]:  # an empty restored batch: the read cache starts empty
                        offset = store.committed_offsets()[TP] + 1
                        store.write_restored(store.restore_batch(), {TP: offset})
                probes = sorted({max(t + d, 0) for t in times for d in (-1, 0, 1)})
                for key in pool:
                    for at in [*probes, store.observed_ms + 3]:
                        fast = outcome(partial(view.get_as_of, key, at))
                        plain = outcome(partial(plain_as_of, store, kser, vser, key, at))
                        assert repr(fast) == repr(plain), (key, at)
        finally:
            store.close()
