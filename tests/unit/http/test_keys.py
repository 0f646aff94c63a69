"""Key text from a URL -> the bytes a store holds, and stored values -> JSON."""

from __future__ import annotations

import base64

import pytest

from worker.http.keys import BadKey, key_bytes, render_key, render_value
from worker.serde import BYTES, JSON, STR, SerdeError


def test_a_str_key_is_the_text_itself_in_utf8() -> None:
    assert key_bytes(STR, "acct-00001") == b"acct-00001"
    assert key_bytes(STR, "zürich/1") == "zürich/1".encode()


def test_a_json_key_is_parsed_and_serialised_as_the_json_serde_writes_it() -> None:
    assert key_bytes(JSON, '"acct-1"') == JSON.serialize("acct-1")
    assert key_bytes(JSON, "42") == JSON.serialize(42)
    assert key_bytes(JSON, '{"a": 1, "b": [1, 2]}') == JSON.serialize({"a": 1, "b": [1, 2]})


def test_a_json_key_that_is_not_json_is_a_bad_key_with_a_hint_about_quotes() -> None:
    with pytest.raises(BadKey, match="quotes"):
        key_bytes(JSON, "acct-1")


@pytest.mark.parametrize(
    "text",
    ["hex:00ff10", "00ff10", "base64:" + base64.urlsafe_b64encode(b"\x00\xff\x10").decode()],
)
def test_a_bytes_key_is_hex_or_url_safe_base64(text: str) -> None:
    assert key_bytes(BYTES, text) == b"\x00\xff\x10"


def test_base64_padding_is_optional_and_the_alphabet_is_url_safe() -> None:
    raw = b"\xfb\xff\xfe"  # encodes to characters that differ between the two alphabets
    encoded = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert "-" in encoded or "_" in encoded
    assert key_bytes(BYTES, "base64:" + encoded) == raw


@pytest.mark.parametrize("text", ["hex:zz", "xyz", "base64:@@@", "abc"])
def test_bad_bytes_keys_are_refused(text: str) -> None:
    with pytest.raises(BadKey):
        key_bytes(BYTES, text)


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(BadKey, match="empty"):
        key_bytes(STR, "")


class UpperSerde:
    """A user's serde with no built-in name: only upper-case keys are valid."""

    def serialize(self, value: object) -> bytes | None:
        if not isinstance(value, str) or not value.isupper():
            raise SerdeError("upper case only")
        return value.encode()

    def deserialize(self, data: bytes | None) -> object:
        return None if data is None else data.decode()


def test_other_serdes_get_the_text_and_their_refusal_is_a_bad_key() -> None:
    serde = UpperSerde()
    assert key_bytes(serde, "ABC") == b"ABC"  # type: ignore[arg-type]
    with pytest.raises(BadKey, match="upper case only"):
        key_bytes(serde, "abc")  # type: ignore[arg-type]


def test_values_render_as_json_and_bytes_as_hex() -> None:
    assert render_value(JSON, b'{"count":3}') == ({"count": 3}, "json")
    assert render_value(STR, b"hello") == ("hello", "json")
    assert render_value(BYTES, b"\x01\x02") == ("0102", "hex")


def test_a_value_that_does_not_decode_raises_serde_error() -> None:
    with pytest.raises(SerdeError):
        render_value(JSON, b"{not json")


def test_keys_render_like_values_and_undecodable_ones_as_hex() -> None:
    assert render_key(STR, b"acct-1") == "acct-1"
    assert render_key(STR, b"\xff") == "ff"
    assert render_key(BYTES, b"\x00") == "00"
