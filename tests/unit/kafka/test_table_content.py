"""A table partition's content folded from its records: the last record per key, or for a
versioned table the record with the largest time, whichever came last."""

from __future__ import annotations

from worker.kafka.table_reader import PartitionContent


def fold(records, by_time):
    content = PartitionContent()
    for key, value, timestamp in records:
        content.apply(key, value, timestamp, by_time)
    return content


BACKFILL = [  # the current version, then an older one loaded after it
    (b"a", b"new", 2_000),
    (b"b", b"only", 1_000),
    (b"a", b"old", 1_000),
]


def test_a_plain_table_holds_each_keys_last_record_and_its_time():
    content = fold(BACKFILL, by_time=False)

    assert content.rows == {b"a": b"old", b"b": b"only"}
    assert content.times == {b"a": 1_000, b"b": 1_000}
    assert content.records == 3


def test_a_versioned_table_holds_each_keys_newest_version_whatever_came_last():
    content = fold(BACKFILL, by_time=True)

    assert content.rows == {b"a": b"new", b"b": b"only"}
    assert content.times == {b"a": 2_000, b"b": 1_000}


def test_a_versioned_tables_tombstone_deletes_only_from_its_time_on():
    deleted = [(b"a", b"v1", 1_000), (b"a", None, 3_000), (b"a", b"older", 2_000)]
    revived = [(b"a", b"v1", 1_000), (b"a", None, 3_000), (b"a", b"later", 3_000)]

    assert fold(deleted, by_time=True).rows == {}
    assert fold(revived, by_time=True).rows == {b"a": b"later"}  # equal times: the last
    assert fold(deleted, by_time=False).rows == {b"a": b"older"}


def test_records_without_a_key_are_counted_but_hold_nothing():
    content = fold([(None, b"x", 1_000)], by_time=True)

    assert content.rows == {} and content.records == 1
