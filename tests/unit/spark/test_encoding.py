"""Rows become exactly the bytes and partition the worker expects, or a clear rejection."""

from __future__ import annotations

import pickle
from decimal import Decimal
from typing import Any

import orjson
import pytest

from worker.partitioner import partition_for
from worker.serde import BYTES, JSON, STR
from worker.spark.encoding import RowRejected, TableEncoder, check_columns, resolve_serde
from worker.spark.errors import LoadRejected

COLUMNS = ("account", "mean", "std", "n")


class FakeRow(tuple):
    """A Spark ``Row``'s relevant behaviour: a tuple with ``asDict(recursive=True)``."""

    fields: tuple[str, ...] = ()

    def __new__(cls, **values: Any) -> FakeRow:
        row = super().__new__(cls, values.values())
        row.fields = tuple(values)
        return row

    def asDict(self, recursive: bool = False) -> dict[str, Any]:  # noqa: N802 - Spark's name
        return {
            k: v.asDict(True) if isinstance(v, FakeRow) else v
            for k, v in zip(self.fields, self, strict=True)
        }


def decoded(value: bytes | None) -> Any:
    assert value is not None
    return orjson.loads(value)


def encoder(value: Any = ("mean", "std", "n"), **overrides: Any) -> TableEncoder:
    args: dict[str, Any] = {
        "columns": COLUMNS,
        "key_column": "account",
        "value": list(value) if isinstance(value, tuple) else value,
        "key_serde": STR,
        "value_serde": JSON,
        "num_partitions": 4,
    }
    args.update(overrides)
    return TableEncoder(**args)


def test_a_row_becomes_the_serialised_key_and_value_on_the_murmur2_partition_of_the_key():
    partition, key, value, timestamp = encoder().encode(("acct-1", 1500.5, 30.25, 12))

    assert timestamp is None  # no timestamp column: the record carries its write's time
    assert key == b"acct-1"
    assert decoded(value) == {"mean": 1500.5, "std": 30.25, "n": 12}
    assert partition == partition_for(b"acct-1", 4)


def test_a_single_value_column_is_the_value_itself_and_null_is_a_delete():
    enc = encoder(value="mean")

    assert enc.encode(("a", 2.5, None, None))[2] == b"2.5"
    assert enc.encode(("a", None, 1.0, 1))[2] is None


def test_a_value_function_sees_the_row_as_a_dict_and_none_deletes():
    enc = encoder(value=lambda row: None if row["n"] == 0 else {"avg": row["mean"]})

    assert decoded(enc.encode(("a", 3.0, 0.0, 2))[2]) == {"avg": 3.0}
    assert enc.encode(("a", 3.0, 0.0, 0))[2] is None


def test_struct_values_become_json_objects():
    enc = TableEncoder(("id", "profile"), "id", "profile", STR, JSON, 3)
    row = ("k", FakeRow(mean=1.0, tags=["x"], inner=FakeRow(a=1)))

    assert decoded(enc.encode(row)[2]) == {"mean": 1.0, "tags": ["x"], "inner": {"a": 1}}


def test_keys_are_serialised_with_the_key_serde_before_partitioning():
    enc = TableEncoder(("id", "v"), "id", "v", JSON, JSON, 7)

    partition, key, _, _ = enc.encode((42, "x"))

    assert key == b"42"
    assert partition == partition_for(b"42", 7)


def test_a_null_key_is_rejected_naming_the_column():
    with pytest.raises(RowRejected, match="key column 'account' is null"):
        encoder().encode((None, 1.0, 1.0, 1))


def test_a_key_the_serde_cannot_take_is_rejected():
    with pytest.raises(RowRejected, match="key column 'account' \\(12\\): str serde needs str"):
        encoder().encode((12, 1.0, 1.0, 1))


def test_a_value_that_does_not_serialise_is_rejected_naming_the_key():
    with pytest.raises(RowRejected, match="value of key 'a': not JSON-serialisable"):
        encoder().encode(("a", Decimal("1.5"), 1.0, 1))


def test_a_failing_value_function_is_a_rejection_not_a_crash():
    with pytest.raises(RowRejected, match="value function failed: KeyError"):
        encoder(value=lambda row: row["missing"]).encode(("a", 1.0, 1.0, 1))


def test_the_encoder_pickles_for_spark_workers():
    enc = encoder()
    row = ("acct-9", 1.0, 2.0, 3)

    assert pickle.loads(pickle.dumps(enc)).encode(row) == enc.encode(row)


def test_an_encoder_for_missing_columns_cannot_be_built():
    with pytest.raises(LoadRejected, match="column 'nope' not in the input"):
        encoder(value=["mean", "nope"])


SCHEMA = {"account": "string", "n": "bigint", "amount": "decimal(10,2)", "raw": "binary"}


@pytest.mark.parametrize(
    ("key", "value", "key_serde", "value_serde", "message"),
    [
        ("id", ["n"], STR, JSON, "column 'id' not in the input; columns: account, n, amount, raw"),
        ("account", ["n", "x"], STR, JSON, "column 'x' not in the input"),
        ("account", [], STR, JSON, "no value columns given"),
        ("n", ["account"], STR, JSON, "key column 'n' is bigint, but the str serde needs string"),
        (
            "account",
            "n",
            STR,
            BYTES,
            "value column 'n' is bigint, but the bytes serde needs binary",
        ),
        ("account", ["amount"], STR, JSON, "'amount' is decimal\\(10,2\\).*cast it to double"),
        ("account", ["raw"], STR, JSON, "'raw' is binary.*base64"),
        ("account", "amount", STR, JSON, "'amount' is decimal"),
    ],
)
def test_schema_checks_name_the_column_and_the_fix(key, value, key_serde, value_serde, message):
    with pytest.raises(LoadRejected, match=message):
        check_columns(SCHEMA, key, value, key_serde, value_serde)


@pytest.mark.parametrize(
    "spark_type",
    ["map<int,string>", "struct<a:decimal(5,1)>", "array<binary>", "map<bigint,double>"],
)
def test_nested_types_json_cannot_write_are_caught_too(spark_type):
    with pytest.raises(LoadRejected, match="does not serialise to JSON"):
        check_columns({"k": "string", "v": spark_type}, "k", ["v"], STR, JSON)


@pytest.mark.parametrize(
    ("spark_type", "value", "json"),
    [
        ("double", 1.5, 1.5),
        ("bigint", 2**40, 2**40),
        ("string", "x", "x"),
        ("map<string,double>", {"a": 1.0}, {"a": 1.0}),
        ("struct<binary_ok:int>", FakeRow(binary_ok=1), {"binary_ok": 1}),
        ("array<int>", [1, 2], [1, 2]),
    ],
)
def test_types_json_can_write_pass_and_their_values_encode(spark_type, value, json):
    check_columns({"k": "string", "v": spark_type}, "k", ["v"], STR, JSON)

    record = TableEncoder(("k", "v"), "k", ["v"], STR, JSON, 1).encode(("a", value))

    assert decoded(record[2]) == {"v": json}


def test_a_value_function_is_not_checked_against_the_schema():
    schema = {"k": "string", "v": "decimal(3,1)"}
    with pytest.raises(LoadRejected, match="'v' is decimal"):
        check_columns(schema, "k", ["v"], STR, JSON)  # the column itself would not encode

    check_columns(schema, "k", lambda row: float(row["v"]), STR, JSON)  # the function casts

    enc = TableEncoder(("k", "v"), "k", lambda row: float(row["v"]), STR, JSON, 1)
    assert enc.encode(("a", Decimal("1.5")))[2] == b"1.5"


def test_serdes_resolve_by_name_and_unknown_names_are_rejected():
    assert resolve_serde("json") is JSON
    assert resolve_serde(STR) is STR
    with pytest.raises(LoadRejected, match="unknown serde 'avro'"):
        resolve_serde("avro")
