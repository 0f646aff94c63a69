"""The view of a TTL store: Python keys and values that expire in the task's stream time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from worker.errors import TopologyError
from worker.processing import Topology
from worker.processing.ttl_views import TtlKeyValueStore
from worker.serde import BYTES, JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.ttl import ReservedKey
from worker.state.ttl_store import TtlStore, open_store


@dataclass
class Clock:
    timestamp: int = 0
    stream_time: int = 0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TtlStore]:
    opened = open_store(tmp_path / "s", RocksDBEnv(4 * MiB), "s", 100)
    assert isinstance(opened, TtlStore)
    yield opened
    opened.close()


def test_keys_expire_ttl_ms_after_the_write_in_stream_time(store: TtlStore) -> None:
    clock = Clock()
    view = TtlKeyValueStore("s", store, STR, JSON, clock)
    clock.timestamp = clock.stream_time = 1000
    view.put("a", {"n": 1})
    clock.timestamp = clock.stream_time = 1050  # b is written later: it lives longer
    view.put("b", {"n": 2})
    clock.stream_time = 1099
    assert view.get("a") == {"n": 1}
    with view.range() as found:
        assert list(found) == [("a", {"n": 1}), ("b", {"n": 2})]
    clock.stream_time = 1100
    assert view.get("a") is None
    with view.prefix("") as found:
        assert list(found) == [("b", {"n": 2})]
    view.put("b", None)
    assert view.get("b") is None


def test_a_bytes_key_in_the_reserved_space_is_refused(store: TtlStore) -> None:
    view = TtlKeyValueStore("s", store, BYTES, BYTES, Clock())
    with pytest.raises(ReservedKey, match="reserved"):
        view.put(b"\xff\x00", b"v")


@pytest.mark.parametrize("ttl_ms", [0, -5, 1.5, "60", True])
def test_add_store_refuses_a_ttl_that_is_not_a_positive_int(ttl_ms: object) -> None:
    with pytest.raises(TopologyError, match="ttl_ms must be an int >= 1"):
        Topology().add_store("s", ttl_ms=ttl_ms)  # type: ignore[arg-type]


def test_add_store_keeps_the_ttl_in_the_spec() -> None:
    built = (
        Topology()
        .add_source("in", "in")
        .add_store("s", ttl_ms=60_000)
        .add_processor("p", lambda ctx, k, v: None, ["in"], stores=["s"])
        .build()
    )
    assert built.store("s")[1].ttl_ms == 60_000


def test_a_write_is_never_timed_after_stream_time(store: TtlStore) -> None:
    clock = Clock(timestamp=10_000, stream_time=1000)  # a wall-clock punctuation, say
    view = TtlKeyValueStore("s", store, STR, STR, clock)
    view.put("a", "x")
    clock.stream_time = 1100
    assert view.get("a") is None  # expired 100 ms after stream time 1000, not 10,000
