"""Serdes: exact round-trips, None as delete, and SerdeError as the only failure."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.serde import BYTES, JSON, STR, Serde, SerdeError, by_name, fast_serializer

ALL_SERDES = [BYTES, STR, JSON]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=20,
)


@pytest.mark.parametrize(
    ("serde", "value", "encoded"),
    [
        (BYTES, b"\x00\xffraw", b"\x00\xffraw"),
        (STR, "konto-ü", "konto-ü".encode()),
        (JSON, {"account": "a-1", "amount": 12.5}, b'{"account":"a-1","amount":12.5}'),
        (JSON, [1, "two", None], b'[1,"two",null]'),
    ],
)
def test_values_round_trip_through_their_exact_bytes(
    serde: Serde, value: Any, encoded: bytes
) -> None:
    assert serde.serialize(value) == encoded
    assert serde.deserialize(encoded) == value


@pytest.mark.parametrize("serde", ALL_SERDES, ids=lambda s: s.name)
def test_none_means_delete_in_both_directions(serde: Serde) -> None:
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None


def test_bytes_serde_accepts_bytearray_and_memoryview_as_bytes() -> None:
    assert BYTES.serialize(bytearray(b"ab")) == b"ab"
    assert BYTES.serialize(memoryview(b"cd")) == b"cd"


@pytest.mark.parametrize(
    ("serde", "bad_bytes", "message"),
    [
        (STR, b"\xff\xfe\xfa", "not UTF-8"),
        (JSON, b"{not json", "not JSON"),
        (JSON, b"\xff", "not JSON"),
    ],
)
def test_undecodable_bytes_raise_a_clear_serde_error(
    serde: Serde, bad_bytes: bytes, message: str
) -> None:
    with pytest.raises(SerdeError, match=message):
        serde.deserialize(bad_bytes)


@pytest.mark.parametrize(
    ("serde", "value", "message"),
    [
        (BYTES, "text", "needs bytes"),
        (STR, b"raw", "needs str"),
        (JSON, {1, 2}, "not JSON-serialisable"),
    ],
)
def test_unencodable_values_raise_a_clear_serde_error(
    serde: Serde, value: Any, message: str
) -> None:
    with pytest.raises(SerdeError, match=message):
        serde.serialize(value)


def test_serde_error_is_a_value_error() -> None:
    assert issubclass(SerdeError, ValueError)


def test_serdes_are_found_by_name_and_unknown_names_are_a_serde_error() -> None:
    assert by_name("json") is JSON
    assert by_name("str") is STR
    assert by_name("bytes") is BYTES
    with pytest.raises(SerdeError, match="unknown serde"):
        by_name("avro")


@pytest.mark.parametrize("serde", ALL_SERDES, ids=lambda s: s.name)
@given(data=st.binary(max_size=256))
def test_random_bytes_decode_or_raise_serde_error_and_nothing_else(
    serde: Serde, data: bytes
) -> None:
    try:
        value = serde.deserialize(data)
    except SerdeError:
        return
    # What decodes is a value of the serde's own: it encodes and decodes back to itself.
    assert serde.deserialize(serde.serialize(value)) == value


@given(text=st.text())
def test_any_text_round_trips_through_str(text: str) -> None:
    assert STR.deserialize(STR.serialize(text)) == text


@given(value=json_values)
def test_any_json_value_round_trips_through_json(value: Any) -> None:
    assert JSON.deserialize(JSON.serialize(value)) == value


@given(data=st.binary())
def test_any_bytes_round_trip_through_bytes(data: bytes) -> None:
    assert BYTES.deserialize(BYTES.serialize(data)) == data


@given(json_values.filter(lambda v: v is not None))
def test_the_fast_json_encoder_for_kept_bytes_gives_the_serdes_bytes(
    value: Any,
) -> None:
    serialize = JSON.serialize(value)
    kept = fast_serializer(JSON, kept=True)(value)

    assert kept == serialize == fast_serializer(JSON)(value)
    assert type(kept) is bytes
