"""TTL against a model: reads match "last write + ttl", sweeps leave nothing due behind,
and the index stays as small as the store."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.state.ttl import (
    decode,
    encode,
    expires_at,
    index_changes,
    index_key,
    live_value,
    parse_index_key,
    plan_sweep,
    sweep_budget,
)

TTL = 100
writes = st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.integers(-50, 200))
batches = st.lists(st.lists(writes, max_size=6), max_size=12)


@given(batches=batches, writer_has_old_value=st.booleans())
def test_sweeps_keep_store_and_index_bounded_and_reads_match_the_model(
    batches: list[list[tuple[bytes, int]]], writer_has_old_value: bool
) -> None:
    store: dict[bytes, bytes] = {}
    index: set[bytes] = set()
    last_write: dict[bytes, int] = {}
    stream_time = -1
    for batch in batches:
        for key, delta in batch:
            ts = max(0, stream_time + delta)
            stream_time = max(stream_time, ts)
            expiry = expires_at(ts, TTL)
            old = store.get(key) if writer_has_old_value else None
            stale, entry = index_changes(key, old, expiry)
            index.discard(stale or b"")
            index.add(entry)
            store[key] = encode(b"%d" % ts, expiry)
            last_write[key] = ts

        plan = plan_sweep(sorted(index), stream_time, sweep_budget(len(batch)), store.get)
        for key in plan.expired:
            del store[key]
        index.difference_update(plan.index_deletes)

        assert not plan.more
        for key, ts in last_write.items():
            alive = ts + TTL > stream_time
            assert live_value(store.get(key), stream_time) == (b"%d" % ts if alive else None)
            assert (key in store) == alive
        assert all(parse_index_key(e)[0] > stream_time for e in index)
        assert {index_key(decode(v)[0], k) for k, v in store.items()} <= index
        if writer_has_old_value:
            assert len(index) == len(store)
