"""Per-key TTL: stored shape, read filter, expiry index, sweep planning."""

from __future__ import annotations

import pytest

from worker.state.scan import KeyRange, prefix_range
from worker.state.ttl import (
    EXPIRY_INDEX_PREFIX,
    MIN_SWEEP_BUDGET,
    RESERVED_PREFIX,
    CorruptTtlValue,
    ReservedKey,
    check_key,
    check_ttl,
    decode,
    encode,
    expires_at,
    index_changes,
    index_key,
    index_key_for,
    is_index_key,
    live_value,
    parse_index_key,
    plan_sweep,
    sweep_budget,
)


def test_the_stored_shape_is_an_8_byte_big_endian_expiry_then_the_value() -> None:
    stored = encode(b"v", 0x0102)

    assert stored == b"\x00\x00\x00\x00\x00\x00\x01\x02v"
    assert decode(stored) == (0x0102, b"v")
    assert decode(encode(b"", 7)) == (7, b"")


def test_a_value_without_its_prefix_is_corrupt() -> None:
    with pytest.raises(CorruptTtlValue):
        decode(b"short")


def test_a_key_reads_as_absent_from_the_moment_stream_time_reaches_its_expiry() -> None:
    stored = encode(b"v", expires_at(1_000, 500))

    assert live_value(stored, 1_499) == b"v"
    assert live_value(stored, 1_500) is None
    assert live_value(None, 0) is None


def test_index_entries_sort_by_expiry_then_key_and_parse_back() -> None:
    entries = [index_key(t, k) for t, k in [(300, b"a"), (2, b"z"), (256, b"b"), (2, b"y")]]

    assert [parse_index_key(e) for e in sorted(entries)] == [
        (2, b"y"),
        (2, b"z"),
        (256, b"b"),
        (300, b"a"),
    ]
    assert all(is_index_key(e) and e in prefix_range(EXPIRY_INDEX_PREFIX) for e in entries)
    assert not any(e in KeyRange().below(RESERVED_PREFIX) for e in entries)


def test_a_key_that_is_not_an_index_entry_does_not_parse() -> None:
    with pytest.raises(CorruptTtlValue):
        parse_index_key(b"user-key")


def test_user_keys_starting_with_ff_are_refused_and_text_keys_never_are() -> None:
    assert check_key("caf\u00e9 \U0001f600".encode()) == "caf\u00e9 \U0001f600".encode()
    with pytest.raises(ReservedKey):
        check_key(b"\xffabc")


@pytest.mark.parametrize("bad", [0, -5, 1.5, "60000", None])
def test_a_ttl_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="ttl_ms"):
        check_ttl(bad)


def test_a_put_replaces_the_old_index_entry_only_when_the_expiry_changed() -> None:
    assert index_changes(b"k", None, 50) == (None, index_key(50, b"k"))
    assert index_changes(b"k", encode(b"old", 50), 50) == (None, index_key(50, b"k"))
    assert index_changes(b"k", encode(b"old", 40), 50) == (index_key(40, b"k"), index_key(50, b"k"))


def test_restore_rebuilds_the_index_entry_from_the_stored_value() -> None:
    assert index_key_for(b"k", encode(b"v", 99)) == index_key(99, b"k")


def sweep(
    stored: dict[bytes, bytes], index: list[bytes], now: int, budget: int = 100
) -> tuple[set[bytes], set[bytes], bool]:
    plan = plan_sweep(sorted(index), now, budget, stored.get)
    return set(plan.expired), set(plan.index_deletes), plan.more


def test_the_sweep_deletes_due_keys_and_their_entries_and_stops_at_the_first_not_due() -> None:
    stored = {b"a": encode(b"1", 10), b"b": encode(b"2", 20), b"c": encode(b"3", 30)}
    index = [index_key(10, b"a"), index_key(20, b"b"), index_key(30, b"c")]

    assert sweep(stored, index, now=20) == (
        {b"a", b"b"},
        {index_key(10, b"a"), index_key(20, b"b")},
        False,
    )


def test_stale_entries_are_dropped_without_deleting_the_key() -> None:
    stored = {b"rewritten": encode(b"new", 90)}
    index = [index_key(10, b"rewritten"), index_key(15, b"gone"), index_key(90, b"rewritten")]

    assert sweep(stored, index, now=50) == (
        set(),
        {index_key(10, b"rewritten"), index_key(15, b"gone")},
        False,
    )


def test_the_budget_bounds_one_sweep_and_says_there_is_more() -> None:
    stored = {bytes([k]): encode(b"v", k) for k in range(10)}
    index = [index_key(k, bytes([k])) for k in range(10)]

    expired, deletes, more = sweep(stored, index, now=100, budget=3)

    assert expired == {b"\x00", b"\x01", b"\x02"}
    assert len(deletes) == 3
    assert more
    assert sweep(stored, index[:3], now=100, budget=3)[2] is False


def test_the_sweep_budget_outpaces_the_writes() -> None:
    assert sweep_budget(0) == MIN_SWEEP_BUDGET
    assert sweep_budget(10_000) == 20_000
