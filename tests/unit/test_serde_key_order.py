"""The key order docs/time.md states per built-in serde (scans return keys in this order)."""

from __future__ import annotations

from typing import Any

from worker.serde import BYTES, JSON, STR, Serde


def in_key_order(serde: Serde, keys: list[Any]) -> list[Any]:
    return sorted(keys, key=serde.serialize)


def test_bytes_keys_sort_as_unsigned_bytes_and_big_endian_ints_numerically() -> None:
    numbers = [256, 1, 65_535, 0, 2]

    assert in_key_order(BYTES, [n.to_bytes(8, "big") for n in numbers]) == [
        n.to_bytes(8, "big") for n in sorted(numbers)
    ]
    assert in_key_order(BYTES, [b"\xff", b"\x00\x01", b"\x00"]) == [b"\x00", b"\x00\x01", b"\xff"]


def test_str_keys_sort_by_code_point_not_by_number_or_locale() -> None:
    assert in_key_order(STR, ["a", "B", "\u00e9", "z"]) == ["B", "a", "z", "\u00e9"]
    assert in_key_order(STR, ["9", "10"]) == ["10", "9"]
    assert in_key_order(STR, ["000000000009", "000000000010"]) == ["000000000009", "000000000010"]


def test_json_keys_sort_by_type_then_as_text() -> None:
    keys: list[Any] = [{"a": 1}, True, False, [1], 9, 10, -2, -1, "s"]

    assert in_key_order(JSON, keys) == ["s", -1, -2, 10, 9, [1], False, True, {"a": 1}]


def test_json_object_keys_in_another_order_are_another_key() -> None:
    assert JSON.serialize({"a": 1, "b": 2}) != JSON.serialize({"b": 2, "a": 1})
