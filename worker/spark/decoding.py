"""Table records -> DataFrame rows: the columns a table's serdes give, checked value by value.

Pure Python, no pyspark: the Spark data source (``worker.spark.datasource``) runs it in
the executors, and the unit tests run it as it is. A table reads as one row per key:

* the key column (``key`` unless named), typed by the key serde;
* for a JSON value that is an object: one column per field (``{"mean", "std", "n"}``
  becomes ``mean, std, n``); for any other value, one ``value`` column.

Without a schema from the caller one is inferred from a sample of the table's values
(:func:`infer_fields`). Either way every value is checked against its column's type as it
is decoded, and one that does not fit fails the read with :class:`SchemaMismatch` naming
the key, the column and the value: a silently nulled or truncated column would make an
export or a reconciliation wrong without saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from worker.serde import Serde, SerdeError
from worker.spark.errors import SchemaMismatch

Field = tuple[str, str]  # (column name, Spark SQL type name as in a DDL string)
RAW_FIELDS: tuple[Field, ...] = (("partition", "int"), ("key", "binary"), ("value", "binary"))
STAMPED_FIELDS: tuple[Field, ...] = (*RAW_FIELDS, ("timestamp", "bigint"))  # what loads write
_NAMES = {"bigint": "bigint", "long": "bigint", "int": "bigint", "integer": "bigint"}
_NAMES |= {"double": "double", "float": "double", "string": "string", "binary": "binary"}
_NAMES |= {"boolean": "boolean"}
_SERDE_TYPES = {"str": "string", "bytes": "binary"}


def ddl(fields: Iterable[Field]) -> str:
    """A DDL schema string: ``key string, mean double``."""
    return ", ".join(f"`{name}` {kind}" for name, kind in fields)


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, bytes):
        return "binary"
    return "string"  # str, and nested lists and objects as JSON text


def _merge(kinds: set[str]) -> str:
    if kinds <= {"bigint", "double"} and kinds:
        return "double" if "double" in kinds else "bigint"
    return kinds.pop() if len(kinds) == 1 else "string"


def infer_fields(
    samples: Iterable[tuple[bytes, bytes]],
    key_serde: Serde,
    value_serde: Serde,
    key_column: str = "key",
) -> tuple[Field, ...]:
    """The columns of a table from a sample of its (key, value) records.

    Raises SchemaMismatch when a sampled record does not decode with the serdes.
    """
    key_kinds: set[str] = set()
    value_kinds: set[str] = set()
    columns: dict[str, set[str]] = {}
    objects = True
    for key, value in samples:
        decoded_key = _decode(key_serde, key, "key", key)
        decoded = _decode(value_serde, value, "value", key)
        key_kinds.add(_kind_of(decoded_key))
        if isinstance(decoded, dict):
            for name, item in decoded.items():
                if item is not None:
                    columns.setdefault(name, set()).add(_kind_of(item))
                else:
                    columns.setdefault(name, set())
        else:
            objects = False
            if decoded is not None:
                value_kinds.add(_kind_of(decoded))
    key_kind = _SERDE_TYPES.get(key_serde.name) or _merge(key_kinds or {"string"})
    if not objects or not columns:
        value_kind = _SERDE_TYPES.get(value_serde.name) or _merge(value_kinds or {"string"})
        return ((key_column, key_kind), ("value", value_kind))
    if key_column in columns:
        raise SchemaMismatch(
            f"the values have a field named {key_column!r}, like the key column: name the key"
            " column otherwise (option keyColumn)"
        )
    return ((key_column, key_kind), *((n, _merge(k or {"string"})) for n, k in columns.items()))


def _decode(serde: Serde, data: bytes, role: str, key: bytes) -> Any:
    try:
        return serde.deserialize(data)
    except (SerdeError, ValueError, TypeError) as exc:
        raise SchemaMismatch(
            f"the {role} of key {key[:40]!r} does not decode with the {serde.name} serde"
            f" ({exc}): is that the table's {role} serde?"
        ) from None


def _convert(kind: str, value: Any, column: str, key: Any) -> Any:
    """``value`` as Spark takes it for a column of ``kind``; SchemaMismatch if it is not one."""
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bytes):
            raise SchemaMismatch(f"key {key!r}: column {column!r} is string, the value is bytes")
        return orjson.dumps(value).decode()
    ok = {
        "bigint": isinstance(value, int) and not isinstance(value, bool),
        "double": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "binary": isinstance(value, bytes),
    }[kind]
    if not ok:
        raise SchemaMismatch(
            f"key {key!r}: column {column!r} is {kind} but the table holds {value!r}:"
            " the schema does not match the table's values"
        )
    return float(value) if kind == "double" else value


@dataclass(frozen=True)
class RowDecoder:
    """Decodes (key, value) records into rows of ``fields`` (picklable, sent to executors)."""

    fields: tuple[Field, ...]
    key_serde: Serde
    value_serde: Serde

    @classmethod
    def for_schema(
        cls, fields: Sequence[Field], key_serde: Serde, value_serde: Serde
    ) -> RowDecoder:
        """A decoder for a caller's schema; SchemaMismatch for a type it cannot fill."""
        if len(fields) < 2:
            raise SchemaMismatch("a table reads as a key column and at least one value column")
        normalised = []
        for name, kind in fields:
            plain = _NAMES.get(kind.lower())
            if plain is None:
                raise SchemaMismatch(
                    f"column {name!r} is {kind}: a table column is string, bigint, double,"
                    " boolean or binary (nested values read as JSON text in a string)"
                )
            normalised.append((name, plain))
        return cls(tuple(normalised), key_serde, value_serde)

    @property
    def scalar(self) -> bool:
        """True when the value is one ``value`` column rather than an object's fields."""
        return len(self.fields) == 2 and self.fields[1][0] == "value"

    def decode(self, key: bytes, value: bytes | None) -> tuple[Any, ...]:
        """The row of one record. Raises SchemaMismatch (see the module doc)."""
        (key_column, key_kind), *columns = self.fields
        plain_key = _decode(self.key_serde, key, "key", key)
        row = [_convert(key_kind, plain_key, key_column, plain_key)]
        if value is None:  # a tombstone, read as a record: the key alone
            return (*row, *(None for _ in columns))
        decoded = _decode(self.value_serde, value, "value", key)
        if self.scalar:
            row.append(_convert(columns[0][1], decoded, "value", plain_key))
            return tuple(row)
        if not isinstance(decoded, dict):
            raise SchemaMismatch(
                f"key {plain_key!r}: the value is {type(decoded).__name__}, not an object with"
                f" the fields {', '.join(n for n, _ in columns)}"
            )
        for name, kind in columns:
            row.append(_convert(kind, decoded.get(name), name, plain_key))
        return tuple(row)
