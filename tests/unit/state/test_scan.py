"""Scans merging a write buffer with a real RocksDB: bounds, order, deletes, limit, close."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import rocksdict

from worker.state.scan import (
    KeyRange,
    Scan,
    ScanRangeError,
    check_limit,
    key_range,
    prefix_range,
    prefix_upper_bound,
    successor,
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[rocksdict.Rdict]:
    rdict = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    yield rdict
    rdict.close()


def fill(db: rocksdict.Rdict, *keys: bytes) -> None:
    for key in keys:
        db[key] = b"stored:" + key


def scan(
    db: rocksdict.Rdict,
    buffer: dict[bytes, bytes | None],
    rng: KeyRange,
    **kwargs: object,
) -> list[tuple[bytes, bytes]]:
    with Scan(db.iter(), buffer, rng, **kwargs) as found:  # type: ignore[arg-type]
        return list(found)


def test_prefix_upper_bound_increments_the_last_byte_that_is_not_ff() -> None:
    assert prefix_upper_bound(b"ab") == b"ac"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"a\xfe\xff\xff") == b"a\xff"
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"") is None


def test_ranges_are_half_open_and_successor_makes_the_top_inclusive(db: rocksdict.Rdict) -> None:
    fill(db, b"a", b"b", b"c", b"d")

    assert [k for k, _ in scan(db, {}, key_range(b"b", b"d"))] == [b"b", b"c"]
    assert [k for k, _ in scan(db, {}, key_range(b"b", successor(b"d")))] == [b"b", b"c", b"d"]
    assert scan(db, {}, key_range(b"c", b"c")) == []
    assert [k for k, _ in scan(db, {}, key_range(None, b"b"))] == [b"a"]
    assert [k for k, _ in scan(db, {}, key_range(b"c"))] == [b"c", b"d"]


def test_from_after_to_and_bad_limits_are_refused() -> None:
    with pytest.raises(ScanRangeError, match="after"):
        key_range(b"b", b"a")
    with pytest.raises(ScanRangeError, match="bytes"):
        key_range("a", None)  # type: ignore[arg-type]
    with pytest.raises(ScanRangeError, match="maximum"):
        check_limit(1001, maximum=1000)
    with pytest.raises(ScanRangeError):
        check_limit(-1)
    assert check_limit(None, maximum=10) is None


def test_a_prefix_scan_over_ff_bytes_reaches_the_last_key(db: rocksdict.Rdict) -> None:
    fill(db, b"\xfe", b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01")

    assert [k for k, _ in scan(db, {}, prefix_range(b"\xff"))] == [
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\x01",
    ]
    assert [k for k, _ in scan(db, {}, prefix_range(b"\xff\xff"))] == [b"\xff\xff", b"\xff\xff\x01"]


def test_buffered_puts_appear_and_win_over_stored_values(db: rocksdict.Rdict) -> None:
    fill(db, b"a", b"c")
    buffer: dict[bytes, bytes | None] = {b"b": b"new-b", b"c": b"new-c", b"z": b"out of range"}

    assert scan(db, buffer, key_range(b"a", b"d")) == [
        (b"a", b"stored:a"),
        (b"b", b"new-b"),
        (b"c", b"new-c"),
    ]


def test_buffered_deletes_hide_stored_keys_and_later_keys_still_appear(
    db: rocksdict.Rdict,
) -> None:
    # KAFKA-4283 (deleted keys reappeared) and KAFKA-18326 (keys after a tombstone skipped)
    fill(db, b"a", b"b", b"c", b"d")
    buffer: dict[bytes, bytes | None] = {b"b": None, b"c": None, b"bb": None}

    assert [k for k, _ in scan(db, buffer, KeyRange())] == [b"a", b"d"]
    assert [k for k, _ in scan(db, buffer, KeyRange(), reverse=True)] == [b"d", b"a"]


def test_reverse_scans_exclude_the_top_and_include_the_bottom(db: rocksdict.Rdict) -> None:
    fill(db, b"a", b"b", b"c", b"d")
    buffer: dict[bytes, bytes | None] = {b"bb": b"x"}

    assert [k for k, _ in scan(db, buffer, key_range(b"b", b"d"), reverse=True)] == [
        b"c",
        b"bb",
        b"b",
    ]
    assert [k for k, _ in scan(db, {}, key_range(b"b", b"cc"), reverse=True)] == [b"c", b"b"]


def test_the_limit_counts_pairs_yielded_not_deletes(db: rocksdict.Rdict) -> None:
    fill(db, b"a", b"b", b"c", b"d")
    buffer: dict[bytes, bytes | None] = {b"a": None, b"b": None}

    assert [k for k, _ in scan(db, buffer, KeyRange(), limit=1)] == [b"c"]
    assert scan(db, buffer, KeyRange(), limit=0) == []


def test_writes_after_the_scan_opened_do_not_change_it(db: rocksdict.Rdict) -> None:
    fill(db, b"a", b"b", b"c")
    buffer: dict[bytes, bytes | None] = {}
    seen = []

    with Scan(db.iter(), buffer, KeyRange()) as found:  # type: ignore[arg-type]
        for key, _ in found:
            seen.append(key)
            buffer[key] = None  # a punctuator deleting what it walks
            buffer[b"b2"] = b"added"

    assert seen == [b"a", b"b", b"c"]


def test_closing_releases_the_cursor_once_and_stops_the_iteration(
    db: rocksdict.Rdict,
) -> None:
    fill(db, b"a", b"b")
    closed: list[Scan] = []
    found = Scan(db.iter(), {}, KeyRange(), on_close=closed.append)  # type: ignore[arg-type]

    assert next(found) == (b"a", b"stored:a")
    with found:
        pass
    found.close()

    assert found.closed
    assert closed == [found]
    assert list(found) == []


def test_an_exhausted_scan_closes_itself(db: rocksdict.Rdict) -> None:
    fill(db, b"a")
    closed: list[Scan] = []
    found = Scan(db.iter(), {}, KeyRange(), on_close=closed.append)  # type: ignore[arg-type]

    assert list(found) == [(b"a", b"stored:a")]
    assert closed == [found]


def test_a_range_cut_below_a_reserved_prefix_keeps_reserved_keys_out() -> None:
    assert KeyRange().below(b"\xff") == KeyRange(None, b"\xff")
    assert KeyRange(b"a", b"\xff\x01").below(b"\xff") == KeyRange(b"a", b"\xff")
    assert KeyRange(b"\xff\x02", None).below(b"\xff") == KeyRange(b"\xff", b"\xff")
    assert b"\xff" not in KeyRange().below(b"\xff")
