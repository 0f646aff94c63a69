"""The windowed store's layout: keys, values, reserved keys, fetch/emit ranges, expiry."""

from __future__ import annotations

import pytest

from worker.state import window_format as wf
from worker.state.scan import KeyRange


def test_a_fixed_window_key_is_the_start_then_the_key() -> None:
    stored = wf.fixed_key(0x0102, b"acct")

    assert stored == b"\x00\x00\x00\x00\x00\x00\x01\x02acct"
    assert wf.decode_fixed_key(stored) == (0x0102, b"acct")
    assert wf.decode_value(wf.encode_value(7, b"agg")) == (7, b"agg")


def test_times_outside_the_signed_64_bit_range_are_refused() -> None:
    with pytest.raises(ValueError):
        wf.be8(-1)
    with pytest.raises(ValueError):
        wf.be8(2**63)


def test_truncated_entries_are_corrupt() -> None:
    with pytest.raises(wf.CorruptWindowEntry):
        wf.decode_value(b"1234")
    with pytest.raises(wf.CorruptWindowEntry):
        wf.decode_segmented_key(wf.be8(0) + b"key")  # no terminator
    with pytest.raises(wf.CorruptWindowEntry):
        wf.decode_segmented_key(wf.segmented_key(b"k", 1, 2, 60_000) + b"x")


def test_escaping_doubles_zero_bytes_and_terminates() -> None:
    assert wf.escape(b"a\x00b") == b"a\x00\xffb\x00"
    assert wf.escape(b"") == b"\x00"
    assert wf.unescape(b"a\x00\xffb\x00rest") == (b"a\x00b", 5)


def test_a_segmented_key_is_segment_escaped_key_end_start() -> None:
    stored = wf.segmented_key(b"k\x00", 5, 130_000, 60_000)

    assert stored == wf.be8(2) + b"k\x00\xff\x00" + wf.be8(130_000) + wf.be8(5)
    assert wf.decode_segmented_key(stored) == (b"k\x00", 5, 130_000)


def test_reserved_keys_sort_after_every_window_key_and_hold_times() -> None:
    assert wf.OBSERVED_MS == b"\xffobserved_ms"
    top = wf.fixed_key(wf.MAX_TIME_MS, b"\xff" * 8)
    for meta in (wf.OBSERVED_MS, wf.LAST_EMITTED_CLOSE, wf.EXPIRED_UPTO):
        assert meta > top
        assert meta > wf.segmented_key(b"\xff", 0, wf.MAX_TIME_MS, 60_000)
    assert wf.decode_meta(wf.encode_meta(42), -1) == 42
    assert wf.decode_meta(None, -1) == -1


def test_fixed_fetch_reads_the_aligned_starts_in_range_inclusive() -> None:
    keys = list(wf.fixed_fetch_keys(b"k", 5, 30, 10))

    assert [wf.decode_fixed_key(k)[0] for k in keys] == [10, 20, 30]
    assert list(wf.fixed_fetch_keys(b"k", 31, 39, 10)) == []


def test_fetch_all_is_one_contiguous_range_of_starts() -> None:
    found = wf.fixed_time_range(10, 20)

    assert wf.fixed_key(10, b"") in found and wf.fixed_key(20, b"\xff\xff") in found
    assert wf.fixed_key(21, b"") not in found and wf.fixed_key(9, b"\xff") not in found
    assert wf.OBSERVED_MS not in wf.fixed_time_range(0, wf.MAX_TIME_MS)
    assert list(wf.fixed_fetch_keys(b"k", 20, 10, 10)) == []
    assert wf.fixed_time_range(20, 10).lo == wf.fixed_time_range(20, 10).hi


def test_emit_range_covers_what_closed_since_the_last_emit() -> None:
    emit = wf.emit_range(60_000, 120_000)

    assert emit == KeyRange(wf.be8(60_000), wf.be8(120_000))
    assert wf.emit_range(120_000, 120_000) is None
    assert wf.emit_range(-1, 0) is None
    assert wf.emit_range(-1, 1) == KeyRange(wf.be8(0), wf.be8(1))


def test_segment_ranges_take_a_keys_windows_by_end_and_nothing_of_other_keys() -> None:
    interval = 100
    ranges = wf.segment_ranges(b"k", 150, 320, interval)
    inside = [wf.segmented_key(b"k", 0, end, interval) for end in (150, 199, 200, 320)]
    outside = [wf.segmented_key(b"k", 0, end, interval) for end in (149, 321)]
    others = [wf.segmented_key(k, 0, 200, interval) for k in (b"k\x00", b"k\x01", b"", b"j")]

    assert len(ranges) == 3
    assert all(any(key in r for r in ranges) for key in inside)
    assert not any(key in r for r in ranges for key in outside + others)
    assert wf.segment_ranges(b"k", 10, 5, interval) == []


def test_segment_ranges_up_to_the_last_time_stay_below_longer_keys() -> None:
    interval = 2**62
    ranges = wf.segment_ranges(b"k", 0, wf.MAX_TIME_MS, interval)
    last = wf.segmented_key(b"k", 0, wf.MAX_TIME_MS, interval)

    assert any(last in r for r in ranges)
    assert not any(wf.segmented_key(b"k\x00", 0, wf.MAX_TIME_MS, interval) in r for r in ranges)


def test_segment_span_covers_whole_segments() -> None:
    span = wf.segment_span(150, 320, 100)

    assert span == KeyRange(wf.be8(1), wf.be8(4))
    assert wf.segment_span(5, 1, 100) is None


def test_the_segment_interval_is_half_the_retention_and_at_least_a_minute() -> None:
    assert wf.segment_interval(3_600_000) == 1_800_000
    assert wf.segment_interval(10_000) == 60_000


def test_the_expiry_cutoff_never_passes_what_emit_final_emitted() -> None:
    assert wf.expiry_cutoff(1_000_000, 100_000, None) == 900_000
    assert wf.expiry_cutoff(1_000_000, 100_000, 850_000) == 850_000
    assert wf.expiry_cutoff(1_000_000, 100_000, 950_000) == 900_000


def test_expiry_moves_in_whole_steps_below_the_cutoff() -> None:
    plan = wf.plan_expiry(250_000, 0, 60_000, segmented=False)

    assert plan == wf.ExpiryPlan(KeyRange(b"", wf.be8(240_000)), 240_000)
    assert wf.plan_expiry(290_000, 240_000, 60_000, segmented=False) is None
    assert wf.plan_expiry(-5, 0, 60_000, segmented=False) is None
    segmented = wf.plan_expiry(250_000, 0, 60_000, segmented=True)
    assert segmented == wf.ExpiryPlan(KeyRange(b"", wf.be8(4)), 240_000)
    assert wf.segmented_key(b"k", 0, 239_999, 60_000) in segmented.range
    assert wf.segmented_key(b"k", 0, 240_000, 60_000) not in segmented.range
    assert wf.OBSERVED_MS not in segmented.range


def test_reads_filter_what_retention_has_passed() -> None:
    assert wf.is_expired(899_999, 1_000_000, 100_000)
    assert not wf.is_expired(900_000, 1_000_000, 100_000)


def test_restores_judge_retention_by_start_or_end_and_leave_reserved_keys_alone() -> None:
    assert wf.entry_time(wf.fixed_key(120, b"k"), segmented=False) == 120
    assert wf.entry_time(wf.segmented_key(b"k", 100, 180, 60), segmented=True) == 180
    assert wf.is_meta_key(wf.EXPIRED_UPTO)
    assert not wf.is_meta_key(wf.fixed_key(wf.MAX_TIME_MS, b"\xff"))
