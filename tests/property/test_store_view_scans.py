"""Range and prefix scans through a store view and a real Store equal a dict model.

The merge of the task's uncommitted writes with RocksDB is where Kafka Streams shipped
bugs twice (KAFKA-4283, KAFKA-18326), so every scan is checked against a plain dict after
random puts, deletes (of keys committed, buffered, or never written) and commits, in both
directions, with and without limits, through ``KeyValueStore.range`` and ``.prefix`` with
``str`` keys (key order: their UTF-8 bytes) and ``json`` values. ``--hypothesis-seed``
replays a run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.processing.store_views import KeyValueStore
from worker.serde import JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

# Few letters, so ranges and prefixes hit; é and the emoji make UTF-8 order differ from
# the order of the first byte.
KEYS = st.text(alphabet="ab\xe9\U0001f600", max_size=3)
BOUNDS = st.none() | KEYS
LIMITS = st.none() | st.integers(min_value=0, max_value=4)

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, st.integers(0, 9)),
        st.tuples(st.just("delete"), KEYS),
        st.tuples(st.just("commit")),
        st.tuples(st.just("range"), BOUNDS, BOUNDS, st.booleans(), LIMITS),
        st.tuples(st.just("prefix"), KEYS, st.booleans(), LIMITS),
    ),
    max_size=40,
)


@contextmanager
def open_view() -> Iterator[tuple[KeyValueStore, Store, RocksDBEnv]]:
    with tempfile.TemporaryDirectory() as directory:
        env = RocksDBEnv(4 * MiB)
        store = Store.open(Path(directory) / "s", env, "s")
        try:
            yield KeyValueStore("s", store, STR, JSON, read_only=False), store, env
        finally:
            store.close()


def model_scan(
    model: dict[str, Any], keep: Any, reverse: bool, limit: int | None
) -> list[tuple[str, Any]]:
    pairs = sorted(
        ((k, v) for k, v in model.items() if keep(k.encode())), key=lambda kv: kv[0].encode()
    )
    if reverse:
        pairs.reverse()
    return pairs if limit is None else pairs[:limit]


def in_range(lo: str | None, hi: str | None) -> Any:
    return lambda k: (lo is None or k >= lo.encode()) and (hi is None or k < hi.encode())


def starts_with(prefix: str) -> Any:
    return lambda k: k.startswith(prefix.encode())


@settings(max_examples=150, deadline=None)
@given(OPERATIONS)
def test_scans_equal_a_dict_model_through_puts_deletes_and_commits(ops: list[Any]) -> None:
    model: dict[str, Any] = {}
    with open_view() as (view, store, env):
        for op in ops:
            if op[0] == "put":
                view.put(op[1], op[2])
                model[op[1]] = op[2]
            elif op[0] == "delete":
                view.delete(op[1])
                model.pop(op[1], None)
            elif op[0] == "commit":
                store.commit({})
            elif op[0] == "range":
                _, lo, hi, reverse, limit = op
                if lo is not None and hi is not None and lo.encode() > hi.encode():
                    lo, hi = hi, lo
                with view.range(lo, hi, reverse=reverse, limit=limit) as found:
                    got = list(found)
                assert got == model_scan(model, in_range(lo, hi), reverse, limit), op
            else:
                _, prefix, reverse, limit = op
                with view.prefix(prefix, reverse=reverse, limit=limit) as found:
                    got = list(found)
                wanted = model_scan(model, starts_with(prefix), reverse, limit)
                assert got == wanted, op
            assert env.open_scans == 0
        store.commit({})
        assert list(view.range()) == model_scan(model, lambda k: True, False, None)
