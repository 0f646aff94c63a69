"""The windowed layout's promises: round trips, byte order equal to time/key order, escaped
keys that keep their order and never run into each other, ranges equal to a model."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import rocksdict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.state import window_format as wf
from worker.state.scan import KeyRange, Scan

# Few byte values, 0x00 and 0xFF among them, so escapes and shared prefixes are common.
keys = st.binary(max_size=4).map(lambda b: bytes((0, 1, 0xFF)[x % 3] for x in b))
times = st.one_of(
    st.integers(min_value=0, max_value=1_000),
    st.integers(min_value=0, max_value=wf.MAX_TIME_MS),
)
intervals = st.integers(min_value=1, max_value=300)


@given(times, keys, times, st.binary(max_size=8))
def test_fixed_entries_round_trip(start, key, max_ts, aggregate) -> None:
    assert wf.decode_fixed_key(wf.fixed_key(start, key)) == (start, key)
    assert wf.decode_value(wf.encode_value(max_ts, aggregate)) == (max_ts, aggregate)


@given(keys, times, times, intervals)
def test_segmented_keys_round_trip(key, start, end, interval) -> None:
    stored = wf.segmented_key(key, start, end, interval)

    assert wf.decode_segmented_key(stored) == (key, start, end)
    assert wf.unescape(wf.escape(key)) == (key, len(wf.escape(key)))


@given(st.lists(st.tuples(times, keys), min_size=2, max_size=20))
def test_fixed_byte_order_is_start_then_key_order(entries) -> None:
    by_bytes = sorted(entries, key=lambda e: wf.fixed_key(*e))

    assert by_bytes == sorted(entries)


@given(st.lists(st.tuples(keys, times, times), min_size=2, max_size=20), intervals)
def test_segmented_byte_order_is_segment_key_end_start_order(entries, interval) -> None:
    by_bytes = sorted(entries, key=lambda e: wf.segmented_key(e[0], e[2], e[1], interval))

    assert by_bytes == sorted(entries, key=lambda e: (e[1] // interval, e[0], e[1], e[2]))


@given(keys, keys, times, times)
def test_escaping_keeps_order_and_one_keys_entries_never_reach_into_anothers(
    a, b, time_a, time_b
) -> None:
    # what follows an escaped key in the layout is a time, as here
    entry_a = wf.escape(a) + wf.be8(time_a)
    entry_b = wf.escape(b) + wf.be8(time_b)
    if a != b:
        assert (entry_a < entry_b) == (a < b)
        # every entry of ``a`` lies between these two; no entry of ``b`` does
        lowest, highest = wf.escape(a) + wf.be8(0), wf.escape(a) + wf.be8(wf.MAX_TIME_MS)
        assert not lowest <= entry_b <= highest


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("window-format")


_runs = itertools.count()
small_times = st.integers(min_value=0, max_value=600)
windows = st.tuples(keys, small_times, st.integers(min_value=0, max_value=100))


def scan_all(db: rocksdict.Rdict, ranges: list[KeyRange]) -> list[bytes]:
    found: list[bytes] = []
    for key_range in ranges:
        with Scan(db.iter(), {}, key_range) as scan:  # type: ignore[arg-type]
            found.extend(key for key, _ in scan)
    return found


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(windows, max_size=25),
    keys,
    small_times,
    small_times,
    st.integers(min_value=1, max_value=200),
    st.integers(min_value=0, max_value=800),
)
def test_ranges_and_expiry_over_rocksdb_match_a_model(
    scratch, entries, key, end_from, end_to, interval, cutoff
) -> None:
    stored = {
        wf.segmented_key(k, max(0, end - length), end, interval): (k, max(0, end - length), end)
        for k, end, length in entries
    }
    db = rocksdict.Rdict(str(scratch / str(next(_runs))), rocksdict.Options(raw_mode=True))
    try:
        for stored_key in stored:
            db[stored_key] = b"v"
        db[wf.OBSERVED_MS] = wf.encode_meta(cutoff)

        found = scan_all(db, wf.segment_ranges(key, end_from, end_to, interval))
        expected = sorted(
            s for s, (k, _, end) in stored.items() if k == key and end_from <= end <= end_to
        )
        assert found == expected

        plan = wf.plan_expiry(cutoff, 0, interval, segmented=True)
        if plan is not None:
            db.delete_range(plan.range.lo, plan.range.hi)
        kept = {s for s, _ in db.items() if s != wf.OBSERVED_MS}
        upto = 0 if plan is None else plan.expired_upto
        assert kept == {s for s, (_, _, end) in stored.items() if end >= upto}
        assert all(end < cutoff for s, (_, _, end) in stored.items() if s not in kept)
        assert db[wf.OBSERVED_MS] == wf.encode_meta(cutoff)
    finally:
        db.close()
