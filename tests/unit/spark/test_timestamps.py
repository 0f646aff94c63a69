"""Record timestamps from a column: epoch milliseconds, or a rejection naming column and key."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from worker.serde import JSON, STR
from worker.spark.encoding import RowRejected, TableEncoder, check_columns
from worker.spark.errors import LoadRejected
from worker.spark.executor import REJECTED, encode_rows, encode_stats
from worker.spark.timestamps import check_timestamp_column, record_timestamp

MAY_1 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
MAY_1_MS = 1_714_564_800_000


def stamped(num_partitions: int = 4) -> TableEncoder:
    return TableEncoder(("k", "v", "at"), "k", "v", STR, STR, num_partitions, "at")


@pytest.fixture
def in_new_york() -> Iterator[None]:
    """The process's local time zone five hours off UTC, as a Spark executor's may be."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_each_row_carries_the_epoch_milliseconds_of_its_timestamp_column():
    enc = stamped()

    assert enc.encode(("a", "x", MAY_1_MS))[3] == MAY_1_MS
    assert enc.encode(("a", "x", MAY_1))[3] == MAY_1_MS
    assert enc.encode(("a", "x", MAY_1 + timedelta(microseconds=1999)))[3] == MAY_1_MS + 1
    assert enc.encode(("a", "x", "2024-05-01T14:00:00+02:00"))[3] == MAY_1_MS
    assert enc.encode(("a", "x", "2024-05-01T12:00:00.250Z"))[3] == MAY_1_MS + 250


def test_the_timestamp_does_not_change_the_key_value_or_partition():
    plain = TableEncoder(("k", "v", "at"), "k", "v", STR, STR, 4)

    assert stamped().encode(("a", "x", MAY_1_MS))[:3] == plain.encode(("a", "x", MAY_1_MS))[:3]


def test_a_naive_datetime_is_local_time_as_pyspark_hands_a_timestamp_column_over(in_new_york):
    # PySpark gives a timestamp column's instant as a naive datetime in local time.
    local = datetime.fromtimestamp(MAY_1_MS / 1000)
    assert local.hour == 8  # New York, four hours behind UTC in May

    assert record_timestamp(local, "at", "a") == MAY_1_MS


def test_an_aware_datetime_is_its_instant_whatever_the_local_zone(in_new_york):
    tokyo = MAY_1.astimezone(timezone(timedelta(hours=9)))

    assert record_timestamp(tokyo, "at", "a") == MAY_1_MS


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "timestamp column 'at' is null for key 'acct-7'"),
        ("yesterday", "timestamp column 'at' is 'yesterday' for key 'acct-7': not an ISO-8601"),
        ("2024-05-01T12:00:00", "for key 'acct-7': no UTC offset"),
        (0, "is 0 for key 'acct-7': a record's timestamp is epoch milliseconds after 1970"),
        (-5, "is -5 for key 'acct-7'"),
        (MAY_1_MS * 1000, "before the year 10000 \\(microseconds\\?\\)"),
        (1.5e12, "holds float 1500000000000.0 for key 'acct-7': not a time"),
        (True, "holds bool True for key 'acct-7'"),
    ],
)
def test_a_timestamp_that_is_no_instant_rejects_the_row_naming_column_and_key(value, message):
    with pytest.raises(RowRejected, match=message):
        stamped().encode(("acct-7", "x", value))


def test_rejected_timestamps_are_counted_and_reported_like_any_rejected_row():
    rows = [("a", "x", MAY_1_MS), ("b", "y", None), ("c", "z", "noon")]

    records = list(encode_rows(stamped(), rows))
    (stats,) = encode_stats(records)

    assert [r[0] == REJECTED for r in records] == [False, True, True]
    assert stats.rejected == 2 and stats.rows == 3
    assert stats.reasons == [
        "timestamp column 'at' is null for key 'b'",
        "timestamp column 'at' is 'noon' for key 'c': not an ISO-8601 time",
    ]


def test_a_value_function_still_sees_the_timestamp_column():
    enc = TableEncoder(
        ("k", "at"), "k", lambda row: {"since": row["at"]}, STR, JSON, 2, timestamp_column="at"
    )

    _, _, value, timestamp = enc.encode(("a", MAY_1_MS))

    assert value == b'{"since":1714564800000}' and timestamp == MAY_1_MS


def test_the_stamped_encoder_pickles_for_spark_workers():
    enc = pickle.loads(pickle.dumps(stamped()))

    assert enc.encode(("a", "x", MAY_1_MS))[3] == MAY_1_MS


@pytest.mark.parametrize("kind", ["timestamp", "bigint", "int", "string"])
def test_timestamp_types_holding_an_instant_pass_the_schema_check(kind):
    check_timestamp_column({"k": "string", "at": kind}, "at")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"k": "string"}, "timestamp column 'at' not in the input; columns: k"),
        ({"at": "timestamp_ntz"}, "'at' is timestamp_ntz.*to_utc_timestamp it"),
        ({"at": "double"}, "'at' is double.*cast it first"),
        ({"at": "date"}, "'at' is date"),
    ],
)
def test_a_timestamp_column_missing_or_of_another_type_is_refused_before_any_row_is_read(
    schema, message
):
    with pytest.raises(LoadRejected, match=message):
        check_timestamp_column(schema, "at")


def test_an_encoder_or_schema_without_the_timestamp_column_cannot_be_built():
    with pytest.raises(LoadRejected, match="column 'at' not in the input"):
        check_columns({"k": "string", "v": "string"}, "k", "v", timestamp_column="at")
    with pytest.raises(LoadRejected, match="column 'at' not in the input"):
        TableEncoder(("k", "v"), "k", "v", STR, STR, 2, "at")
