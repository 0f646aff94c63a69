"""Table records decode into the columns their serdes give, or fail naming what does not fit."""

from __future__ import annotations

import pytest

from worker.serde import BYTES, JSON, STR
from worker.spark.decoding import RowDecoder, ddl, infer_fields
from worker.spark.errors import SchemaMismatch


def test_object_values_become_one_column_per_field_with_inferred_types():
    samples = [(b"a", b'{"mean": 1, "std": 0.5, "n": 3}'), (b"b", b'{"mean": 2.5, "n": 1}')]

    fields = infer_fields(samples, STR, JSON)

    assert ddl(fields) == "`key` string, `mean` double, `std` double, `n` bigint"


def test_other_values_are_one_value_column_typed_by_the_serde():
    assert infer_fields([(b"a", b"x")], STR, STR) == (("key", "string"), ("value", "string"))
    assert infer_fields([(b"a", b"7")], BYTES, JSON) == (("key", "binary"), ("value", "bigint"))
    assert infer_fields([], STR, JSON) == (("key", "string"), ("value", "string"))


def test_rows_follow_the_schema_and_nested_values_read_as_json_text():
    decoder = RowDecoder.for_schema(
        [("account", "string"), ("mean", "double"), ("tags", "string"), ("gone", "bigint")],
        STR,
        JSON,
    )

    row = decoder.decode(b"a1", b'{"mean": 2, "tags": ["x"], "extra": 1}')

    assert row == ("a1", 2.0, '["x"]', None)
    assert isinstance(row[1], float)


@pytest.mark.parametrize(
    ("fields", "value", "message"),
    [
        ([("key", "string"), ("n", "bigint")], b'{"n": "many"}', "column 'n' is bigint"),
        ([("key", "string"), ("n", "bigint")], b"[1, 2]", "the value is list, not an object"),
        ([("key", "string"), ("value", "bigint")], b"not json", "does not decode with the json"),
    ],
)
def test_a_value_that_does_not_fit_fails_the_read_naming_key_and_column(fields, value, message):
    decoder = RowDecoder.for_schema(fields, STR, JSON)

    with pytest.raises(SchemaMismatch, match=message):
        decoder.decode(b"k", value)


def test_a_schema_with_types_a_table_cannot_fill_is_refused():
    with pytest.raises(SchemaMismatch, match="column 'm' is map<string,int>"):
        RowDecoder.for_schema([("key", "string"), ("m", "map<string,int>")], STR, JSON)
