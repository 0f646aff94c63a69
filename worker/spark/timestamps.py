"""Record timestamps taken from a column: the time each loaded record carries on the topic.

Kafka Streams (and this worker) read a record's timestamp as its event time: a versioned
table serves a version from its record's timestamp on, and windows and stream time
advance by it. A load without a timestamp column stamps every record with the time it
writes it; with one, each record carries its row's time, so a table's history can be
loaded as it was true (docs/spark.md, "Record timestamps").

Pure Python, no pyspark: the encoder calls :func:`record_timestamp` in Spark's Python
workers and the unit tests call it as it is. A column gives epoch milliseconds as

* a Spark ``timestamp`` (a ``datetime`` in Python: a naive one is local time, as PySpark
  converts both ways; an aware one is exact);
* an integer (``bigint``, ``int``): epoch milliseconds, as Kafka stores them;
* a string: ISO-8601 with a UTC offset (``2024-05-01T12:00:00Z``); one without an offset
  is refused, since it does not say which instant it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from worker.spark.errors import LoadRejected

# Spark type names (``DataType.simpleString()``) a timestamp column may have.
TIMESTAMP_TYPES = ("timestamp", "bigint", "int", "string")
# Kafka's producer takes 0 as "now" and refuses negative times; a value past the year
# 9999 is most likely microseconds or nanoseconds given as milliseconds.
_LATEST_MS = 253_402_300_799_999


class TimestampRejected(ValueError):
    """One row's timestamp cannot be a record's timestamp (null, unparseable, out of range)."""


def check_timestamp_column(schema: Mapping[str, str], column: str) -> None:
    """Refuse a missing timestamp column or one of a type that holds no instant in time.

    Raises LoadRejected naming the column and what to cast it to.
    """
    if column not in schema:
        raise LoadRejected(
            f"timestamp column {column!r} not in the input; columns: {', '.join(schema) or 'none'}"
        )
    kind = schema[column]
    if kind not in TIMESTAMP_TYPES:
        raise LoadRejected(
            f"timestamp column {column!r} is {kind}: a record's timestamp comes from a"
            " timestamp, a long of epoch milliseconds or an ISO-8601 string with a UTC"
            " offset; cast it first (a timestamp_ntz does not say which instant it is:"
            " to_utc_timestamp it)"
        )


def record_timestamp(value: Any, column: str, key: Any) -> int:
    """Epoch milliseconds of one row's timestamp ``value`` (see the module doc).

    Raises TimestampRejected naming the column and the row's key.
    """
    if value is None:
        raise TimestampRejected(f"timestamp column {column!r} is null for key {key!r}")
    if isinstance(value, datetime):
        millis = _datetime_millis(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        millis = value
    elif isinstance(value, str):
        millis = _text_millis(value, column, key)
    else:
        raise TimestampRejected(
            f"timestamp column {column!r} holds {type(value).__name__} {value!r} for key"
            f" {key!r}: not a time"
        )
    if not 0 < millis <= _LATEST_MS:
        raise TimestampRejected(
            f"timestamp column {column!r} is {value!r} for key {key!r}: a record's timestamp"
            " is epoch milliseconds after 1970 and before the year 10000 (microseconds?)"
        )
    return millis


def _datetime_millis(value: datetime) -> int:
    # Naive datetimes are local time: what PySpark made of the column's instant. Whole
    # seconds convert exactly; sub-millisecond parts are cut, as Spark's unix_millis does.
    seconds = int(value.replace(microsecond=0).timestamp())
    return seconds * 1000 + value.microsecond // 1000


def _text_millis(text: str, column: str, key: Any) -> int:
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TimestampRejected(
            f"timestamp column {column!r} is {text!r} for key {key!r}: not an ISO-8601 time"
        ) from None
    if parsed.tzinfo is None:
        raise TimestampRejected(
            f"timestamp column {column!r} is {text!r} for key {key!r}: no UTC offset, so"
            " not one instant (add Z or +hh:mm)"
        )
    return _datetime_millis(parsed)
