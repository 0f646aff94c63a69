"""Row -> (partition, key bytes, value bytes): exactly the bytes and partition the worker expects.

Pure Python, no pyspark: the same object runs in the driver's checks, in Spark's Python
workers and in the unit tests. Keys and values go through the worker's own serdes
(``worker.serde``), and the partition is ``worker.partitioner.partition_for`` of the
serialised key bytes: the one murmur2 implementation the worker, its producers and these
jobs share, so every row lands on the partition of the task that owns its key.

The value of a row is described by a :data:`ValueSpec`:

* a column name: that column's value as it is (a struct becomes a dict); null = delete;
* a sequence of column names: a dict ``{column: value}`` of those columns;
* a callable: ``f(row_as_dict)``; returning None deletes the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.partitioner import partition_for
from worker.serde import Serde, SerdeError, by_name
from worker.spark.errors import LoadRejected
from worker.spark.timestamps import TimestampRejected, record_timestamp

ValueSpec = str | Sequence[str] | Callable[[dict[str, Any]], Any]
# (partition, key, value or None = delete, timestamp in epoch ms or None = the write's time)
Encoded = tuple[int, bytes, bytes | None, int | None]

# Spark type names (``DataType.simpleString()``) a serde can take as they are.
_SERDE_TYPES = {"str": ("string",), "bytes": ("binary",)}
# Spark types orjson cannot write (by their simpleString), and what to cast them to.
_NOT_JSON = (
    (re.compile(r"(^|[<:,])decimal\("), "double"),
    (re.compile(r"(^|[<:,])binary($|[>,])"), "a base64 string"),
    (re.compile(r"(^|[<:,])map<(?!string,)"), "a map with string keys"),
)


class RowRejected(ValueError):
    """One row cannot be encoded (null key, value that does not serialise, bad timestamp)."""


def resolve_serde(serde: Serde | str) -> Serde:
    """A serde object from itself or its name; LoadRejected for an unknown name."""
    if isinstance(serde, str):
        try:
            return by_name(serde)
        except SerdeError as exc:
            raise LoadRejected(str(exc)) from None
    return serde


def _plain(value: Any) -> Any:
    """Spark values as plain Python: Rows (structs) become dicts, recursively."""
    if value is None or isinstance(value, str | int | float | bool | bytes):
        return value
    as_dict = getattr(value, "asDict", None)
    if as_dict is not None:
        return as_dict(recursive=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class TableEncoder:
    """Encodes rows whose fields are ``columns`` (in order) into table records.

    Picklable as long as the value callable and custom serdes are (cloudpickle ships
    lambdas). ``num_partitions`` is the partition count of the target topic, checked
    against the topic before any row is encoded. ``timestamp_column`` (optional) gives
    each record its time (``worker.spark.timestamps``); without it the records carry
    the time they are written.
    """

    columns: tuple[str, ...]
    key_column: str
    value: ValueSpec
    key_serde: Serde
    value_serde: Serde
    num_partitions: int
    timestamp_column: str | None = None
    _key_at: int = field(init=False, repr=False)
    _timestamp_at: int | None = field(init=False, repr=False)
    _value_at: tuple[tuple[str, int], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        names = dict.fromkeys(self.columns, "")
        check_columns(names, self.key_column, self.value, timestamp_column=self.timestamp_column)
        at = self.columns.index
        object.__setattr__(self, "_key_at", at(self.key_column))
        object.__setattr__(self, "_value_at", tuple((c, at(c)) for c in value_columns(self.value)))
        stamped = self.timestamp_column
        object.__setattr__(self, "_timestamp_at", None if stamped is None else at(stamped))

    def encode(self, row: Sequence[Any]) -> Encoded:
        """The record for one row (a tuple of values in ``columns`` order, or a Spark Row).

        Raises RowRejected naming the column and the reason.
        """
        key = row[self._key_at]
        if key is None:
            raise RowRejected(f"key column {self.key_column!r} is null")
        try:
            key_bytes = self.key_serde.serialize(_plain(key))
        except (SerdeError, TypeError, ValueError) as exc:
            raise RowRejected(f"key column {self.key_column!r} ({key!r}): {exc}") from None
        if key_bytes is None:  # a custom serde may map a value to "no bytes"
            raise RowRejected(f"key column {self.key_column!r} ({key!r}) serialised to null")
        value = self._value(row)
        try:
            value_bytes = self.value_serde.serialize(value)
        except (SerdeError, TypeError, ValueError) as exc:
            raise RowRejected(f"value of key {key!r}: {exc}") from None
        timestamp = None
        if self._timestamp_at is not None:
            try:
                timestamp = record_timestamp(
                    row[self._timestamp_at], str(self.timestamp_column), key
                )
            except TimestampRejected as exc:
                raise RowRejected(str(exc)) from None
        return partition_for(key_bytes, self.num_partitions), key_bytes, value_bytes, timestamp

    def _value(self, row: Sequence[Any]) -> Any:
        spec = self.value
        if isinstance(spec, str):
            return _plain(row[self._value_at[0][1]])
        if callable(spec):
            try:
                return spec(dict(zip(self.columns, map(_plain, row), strict=True)))
            except Exception as exc:
                raise RowRejected(f"value function failed: {type(exc).__name__}: {exc}") from None
        return {column: _plain(row[at]) for column, at in self._value_at}


def value_columns(value: ValueSpec) -> tuple[str, ...]:
    """The columns a value spec names (none for a callable, which sees the whole row)."""
    if callable(value) and not isinstance(value, str):
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def check_columns(
    schema: Mapping[str, str],
    key_column: str,
    value: ValueSpec,
    key_serde: Serde | None = None,
    value_serde: Serde | None = None,
    *,
    timestamp_column: str | None = None,
) -> None:
    """Check a schema ({column: Spark type name}) before any data is read.

    Raises LoadRejected for a missing key, value or timestamp column, and for column
    types the serdes cannot take (a ``str`` key serde on a number, a decimal in a JSON
    value...), naming the column and what to cast it to. The timestamp column's type is
    :func:`worker.spark.timestamps.check_timestamp_column`'s to check.
    """
    named = value_columns(value)
    if isinstance(value, Sequence) and not isinstance(value, str) and not named:
        raise LoadRejected("no value columns given")
    stamped = () if timestamp_column is None else (timestamp_column,)
    missing = [c for c in (key_column, *named, *stamped) if c not in schema]
    if missing:
        raise LoadRejected(
            f"column {missing[0]!r} not in the input; columns: {', '.join(schema) or 'none'}"
        )
    if key_serde is not None:
        _check_type(schema, key_column, key_serde, "key")
    if value_serde is not None:
        if isinstance(value, str):
            _check_type(schema, value, value_serde, "value")
        elif value_serde.name == "json":
            for column in named:
                _check_json(schema, column)


def _check_type(schema: Mapping[str, str], column: str, serde: Serde, role: str) -> None:
    allowed = _SERDE_TYPES.get(serde.name)
    if allowed is not None and schema[column] not in allowed:
        raise LoadRejected(
            f"{role} column {column!r} is {schema[column]}, but the {serde.name} serde"
            f" needs {' or '.join(allowed)}: cast it first"
        )
    if serde.name == "json":
        _check_json(schema, column)


def _check_json(schema: Mapping[str, str], column: str) -> None:
    for pattern, cast_to in _NOT_JSON:
        if pattern.search(schema[column]):
            raise LoadRejected(
                f"column {column!r} is {schema[column]}, which does not serialise to JSON:"
                f" cast it to {cast_to} first"
            )
