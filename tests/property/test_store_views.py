"""The typed store views' fast path stores and reads exactly what the serdes say.

``KeyValueStore`` inlines the C functions behind the built-in serdes and the store's read
path (worker/processing/context.py); a fix made on one of those paths and not the other
would corrupt reads. So every view operation is checked against the slow, obvious path
on the same real ``Store``: ``serde.serialize`` -> ``Store.put/get`` -> ``serde.deserialize``,
with commits and cleared read caches in between (so reads come from the write buffer, the
read cache and RocksDB), for every built-in serde and for custom ones: without a C fast
path, a subclass of a built-in whose C function would be wrong, and one that stores None.
Errors must match too: the view raises what the serde raises. ``--hypothesis-seed``
replays a run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.processing.store_views import KeyValueStore
from worker.serde import BYTES, JSON, STR, Codec, JsonSerde, Serde, SerdeError
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store


class IntSerde:
    """A custom serde with no C fast path: 8-byte big-endian signed integers."""

    name = "int64"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if type(value) is not int or not -(2**63) <= value < 2**63:
            raise SerdeError(f"not an int64: {value!r}")
        return value.to_bytes(8, "big", signed=True)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else int.from_bytes(data, "big", signed=True)


SORT_KEYS = orjson.OPT_SORT_KEYS


class SortedJsonSerde(JsonSerde):
    """A subclass of a built-in whose output differs from the built-in's C function
    (sorted keys): the fast path must not take it for JSON."""

    name = "sorted-json"

    def serialize(self, value: Any) -> bytes | None:
        data = super().serialize(value)
        return None if data is None else orjson.dumps(orjson.loads(data), option=SORT_KEYS)


class TaggedSerde:
    """A custom serde that encodes None (as an empty value): None keys are storable."""

    name = "tagged"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return b""
        if not isinstance(value, str):
            raise SerdeError(f"tagged serde needs str, got {type(value).__name__}")
        return b"s" + value.encode("utf-8", "surrogatepass")

    def deserialize(self, data: bytes | None) -> Any:
        if data is None or data == b"":
            return None
        return data[1:].decode("utf-8", "surrogatepass")


INT, SORTED_JSON, TAGGED = IntSerde(), SortedJsonSerde(), TaggedSerde()

small_text = st.text(max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats() | small_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(small_text, inner, max_size=3),
    max_leaves=6,
)
# What each serde is given: mostly what it encodes, sometimes what it refuses.
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bytes": st.binary(max_size=6) | st.sampled_from([None, "text", 7]),
    "str": small_text | st.text(st.characters(categories=["Cs"]), max_size=2) | st.none(),
    "json": json_values | st.sampled_from([{1, 2}, b"raw", object]),
    "int64": st.integers(-(2**64), 2**64) | st.sampled_from([None, "7", 1.5]),
    "sorted-json": json_values,
    "tagged": small_text | st.none() | st.sampled_from([3, b"x"]),
}
SERDES: list[Serde] = [BYTES, STR, JSON, INT, SORTED_JSON, TAGGED]
PAIRS = [(BYTES, BYTES), (STR, JSON), (JSON, STR), (JSON, JSON), (STR, STR)] + [
    (INT, SORTED_JSON),
    (TAGGED, INT),
    (SORTED_JSON, TAGGED),
    (TAGGED, TAGGED),
    (BYTES, JSON),
]
T0 = ("changelog", 0)


@dataclass(frozen=True)
class Put:
    key: Any
    value: Any


@dataclass(frozen=True)
class Delete:
    key: Any


@dataclass(frozen=True)
class Get:
    key: Any


@dataclass(frozen=True)
class Commit:
    clear_cache: bool  # then write an empty restored batch: the read cache starts empty


def operations(key_serde: Serde, value_serde: Serde) -> st.SearchStrategy[list[Any]]:
    # None keys (null-key records) and None values (deletes) are drawn often on purpose.
    keys, values = st.none() | VALUES[key_serde.name], st.none() | VALUES[value_serde.name]
    # Keys drawn from a few, so puts, gets and deletes meet the same keys.
    return st.lists(keys, min_size=1, max_size=4, unique_by=repr).flatmap(
        lambda pool: st.lists(
            st.one_of(
                st.builds(Put, st.sampled_from(pool), values),
                st.builds(Delete, st.sampled_from(pool)),
                st.builds(Get, st.sampled_from(pool)),
                st.builds(Commit, st.booleans()),
            ),
            max_size=25,
        )
    )


@contextmanager
def open_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as directory:
        store = Store.open(Path(directory) / "s", RocksDBEnv(4 * MiB), "s")
        try:
            yield store
        finally:
            store.close()


def outcome(action: Any) -> tuple[str, Any]:
    """What calling ``action`` gives: ("ok", result) or ("raises", exception type)."""
    try:
        return "ok", action()
    except Exception as exc:
        return "raises", type(exc)


def stored_key(serde: Serde, key: Any) -> bytes:
    data = serde.serialize(key)
    if data is None:
        raise SerdeError("a key cannot be None")
    return data


def expected_put(store: Store, kser: Serde, vser: Serde, key: Any, value: Any) -> None:
    raw_key = stored_key(kser, key)
    if value is None:
        store.delete(raw_key)
        return
    data = vser.serialize(value)
    assert data is not None
    store.put(raw_key, data)


def check(step: Any, view: KeyValueStore, store: Store, kser: Serde, vser: Serde) -> None:
    if isinstance(step, Get):
        got = outcome(lambda: view.get(step.key))
        wanted = outcome(lambda: vser.deserialize(store.get(stored_key(kser, step.key))))
        assert repr(got) == repr(wanted)  # repr: NaN equals itself, 1 is not True
        return
    if isinstance(step, Commit):
        store.commit({T0: store.committed_offsets().get(T0, 0) + 1})
        if step.clear_cache:
            store.write_restored(store.restore_batch(), {T0: store.committed_offsets()[T0] + 1})
        return
    if isinstance(step, Put):
        through_view = outcome(lambda: view.put(step.key, step.value))
    else:
        through_view = outcome(lambda: view.delete(step.key))
    raw_key = outcome(lambda: stored_key(kser, step.key))
    after_view = store.get(raw_key[1]) if raw_key[0] == "ok" else None
    value = step.value if isinstance(step, Put) else None
    by_hand = outcome(lambda: expected_put(store, kser, vser, step.key, value))
    assert through_view[0] == by_hand[0] and through_view[1] == by_hand[1]
    if raw_key[0] == "ok":
        assert after_view == store.get(raw_key[1])  # the view wrote what the serdes say


@pytest.mark.parametrize(("kser", "vser"), PAIRS, ids=lambda s: s.name)
@settings(max_examples=60)
@given(data=st.data())
def test_a_store_view_stores_and_reads_what_the_serdes_say(
    kser: Serde, vser: Serde, data: st.DataObject
) -> None:
    steps = data.draw(operations(kser, vser))
    with open_store() as store:
        view = KeyValueStore("s", store, kser, vser, read_only=False)
        for step in steps:
            check(step, view, store, kser, vser)


@pytest.mark.parametrize("serde", SERDES, ids=lambda s: s.name)
@given(data=st.data())
def test_a_codec_encodes_and_decodes_as_its_serde(serde: Serde, data: st.DataObject) -> None:
    value = data.draw(VALUES[serde.name])
    codec = Codec(serde, kept=data.draw(st.booleans()))

    encoded = outcome(lambda: codec.encode(value))
    assert repr(encoded) == repr(outcome(lambda: serde.serialize(value)))
    if encoded[0] == "ok":
        assert repr(outcome(lambda: codec.decode(encoded[1]))) == repr(
            outcome(lambda: serde.deserialize(encoded[1]))
        )
    assert repr(outcome(lambda: codec.decode(None))) == repr(
        outcome(lambda: serde.deserialize(None))
    )
