"""Windowed output keys: key bytes, then start and end as 8 big-endian bytes each."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.serde import BYTES, JSON, STR, SerdeError
from worker.windowed_serde import Windowed, WindowedSerde

bounds = st.integers(min_value=0, max_value=2**63 - 1)


def test_the_layout_is_the_inner_key_then_start_then_end() -> None:
    serde = WindowedSerde(STR)

    data = serde.serialize(Windowed("acct-1", 60_000, 120_000))

    assert data == b"acct-1" + (60_000).to_bytes(8, "big") + (120_000).to_bytes(8, "big")
    assert serde.deserialize(data) == Windowed("acct-1", 60_000, 120_000)
    assert serde.name == "windowed(str)"


@given(st.binary(), bounds, bounds)
def test_bytes_keys_round_trip(key, a, b) -> None:
    serde = WindowedSerde(BYTES)
    windowed = Windowed(key, min(a, b), max(a, b))

    assert serde.deserialize(serde.serialize(windowed)) == windowed


@given(st.one_of(st.text(), st.integers(-(2**63), 2**63 - 1), st.lists(st.text())), bounds)
def test_json_and_str_keys_round_trip(key, start) -> None:
    serde = WindowedSerde(JSON)
    windowed = Windowed(key, start, start)

    assert serde.deserialize(serde.serialize(windowed)) == windowed
    if isinstance(key, str):
        assert WindowedSerde(STR).deserialize(WindowedSerde(STR).serialize(windowed)) == windowed


def test_none_is_no_key_both_ways() -> None:
    assert WindowedSerde(JSON).serialize(None) is None
    assert WindowedSerde(JSON).deserialize(None) is None


@pytest.mark.parametrize(
    "value",
    [
        "plain key",
        Windowed("k", 10, 5),
        Windowed("k", -1, 5),
        Windowed("k", 0, 2**63),
        Windowed("k", 1.0, 5),
        Windowed(None, 0, 5),
    ],
)
def test_what_is_not_a_windowed_key_with_sane_bounds_does_not_encode(value) -> None:
    with pytest.raises(SerdeError):
        WindowedSerde(JSON).serialize(value)


def test_bytes_shorter_than_a_window_do_not_decode() -> None:
    with pytest.raises(SerdeError):
        WindowedSerde(BYTES).deserialize(b"\x00" * 15)


def test_serdes_over_the_same_inner_serde_are_equal() -> None:
    assert WindowedSerde(STR) == WindowedSerde(STR)
    assert WindowedSerde(STR) != WindowedSerde(JSON)
    assert len({WindowedSerde(STR), WindowedSerde(STR)}) == 1
