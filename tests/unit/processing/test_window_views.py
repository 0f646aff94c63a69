"""Windowed stores on the topology and as processors see them: definitions validated
naming the key, views writing at the record's timestamp, changelog topic configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeCollector
from tests.support.feeding import feed
from worker.errors import TopologyError
from worker.processing import ProcessorContext, Topology
from worker.processing.built_topology import BuiltTopology, StoreSpec
from worker.processing.graph import TaskGraph
from worker.processing.internal_topics import changelog_config
from worker.processing.windows import InvalidWindow, sliding
from worker.serde import JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.window_stores import SessionStore
from worker.tasks.stores import open_store, window_layout

MINUTE = 60_000


def test_window_store_definitions_are_validated_naming_the_key() -> None:
    topology = Topology()
    with pytest.raises(InvalidWindow) as bad:
        topology.add_window_store(
            "w", MINUTE, advance_ms=2 * MINUTE, grace_ms=0, key_serde=STR, value_serde=JSON
        )
    assert bad.value.key == "advance_ms"
    with pytest.raises(InvalidWindow) as bad:
        topology.add_window_store("w", MINUTE, grace_ms=-1, key_serde=STR, value_serde=JSON)
    assert bad.value.key == "grace_ms"
    with pytest.raises(InvalidWindow) as bad:
        topology.add_session_store(
            "s", MINUTE, grace_ms=0, retention_ms=MINUTE, key_serde=STR, value_serde=JSON
        )
    assert bad.value.key == "retention_ms"


def test_windowed_changelogs_are_compact_delete_with_retention_plus_the_margin() -> None:
    built = (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_window_store("w", MINUTE, grace_ms=1000, key_serde=STR, value_serde=JSON)
        .add_store("kv", STR, JSON)
        .add_processor("p", lambda ctx, k, v: None, ["in"], stores=["w", "kv"])
        .build()
    )
    _st, window_spec = built.store("w")
    _st, kv_spec = built.store("kv")
    assert changelog_config(window_spec, 5000) == {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(MINUTE + 1000 + 5000),
    }
    assert changelog_config(kv_spec) == {"cleanup.policy": "compact"}


class Opened:
    """A task graph of ``built``'s one sub-topology over real stores opened as a task
    opens them; closes them on exit."""

    def __init__(self, built: BuiltTopology, root: Path) -> None:
        st = built.subtopologies[0]
        env = RocksDBEnv(16 * MiB)
        self.stores = {spec.name: open_store(spec, root / spec.name, env) for spec in st.stores}
        self.graph = TaskGraph(st, "0_0", self.stores, FakeCollector())

    def __enter__(self) -> TaskGraph:
        return self.graph

    def __exit__(self, *exc: object) -> None:
        for store in self.stores.values():
            store.close()


def count_per_minute(ctx: ProcessorContext, key: Any, value: Any) -> None:
    windows = ctx.window_store("counts")
    start = ctx.timestamp // MINUTE * MINUTE
    windows.put(key, start, (windows.get(key, start) or 0) + 1)


def sessions_of(ctx: ProcessorContext, key: Any, value: Any) -> None:
    sessions = ctx.session_store("visits")
    ts = ctx.timestamp
    found = sessions.find_sessions(key, ts - 1000, ts + 1000)
    start = min([ts] + [s for s, _e, _v in found])
    end = max([ts] + [e for _s, e, _v in found])
    for s, e, _v in found:
        sessions.remove(key, s, e)
    sessions.put(key, start, end, 1 + sum(v for _s, _e, v in found))


def test_views_write_at_the_record_timestamp_and_read_their_own_writes(
    tmp_path: Path,
) -> None:
    built = (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_window_store(
            "counts", MINUTE, grace_ms=0, retention_ms=3 * MINUTE, key_serde=STR, value_serde=JSON
        )
        .add_session_store(
            "visits", 1000, grace_ms=0, retention_ms=10 * MINUTE, key_serde=STR, value_serde=JSON
        )
        .add_processor("count", count_per_minute, ["in"], stores=["counts"])
        .add_processor("visit", sessions_of, ["in"], stores=["visits"])
        .build()
    )
    with Opened(built, tmp_path) as graph:
        for offset, ts in enumerate([5, 700, 1500, 61_000, 70_000]):
            feed(graph, "input", 0, offset, ts, b"a", b"1")
        window_view = graph.context._nodes["count"].stores["counts"]
        assert window_view.fetch("a", 0, 2 * MINUTE) == [(0, 3), (MINUTE, 2)]
        assert window_view.fetch_all(MINUTE, MINUTE) == [("a", MINUTE, 2)]
        assert window_view.observed_ms == 70_000
        feed(graph, "input", 0, 5, 4 * MINUTE, b"a", b"1")  # window 0 is past retention now
        assert window_view.fetch("a", 0, 2 * MINUTE) == [(MINUTE, 2)]
        session_view = graph.context._nodes["visit"].stores["visits"]
        assert session_view.find_sessions("a", 0, 80_000) == [
            (5, 1500, 3),
            (61_000, 61_000, 1),
            (70_000, 70_000, 1),
        ]


def test_asking_for_the_wrong_kind_of_store_names_it(tmp_path: Path) -> None:
    def wrong(ctx: ProcessorContext, key: Any, value: Any) -> None:
        ctx.session_store("counts")

    built = (
        Topology()
        .add_source("in", "input", STR, JSON)
        .add_window_store("counts", MINUTE, grace_ms=0, key_serde=STR, value_serde=JSON)
        .add_processor("p", wrong, ["in"], stores=["counts"])
        .build()
    )
    with (
        Opened(built, tmp_path) as graph,
        pytest.raises(TopologyError, match="not a SessionStoreView"),
    ):
        feed(graph, "input", 0, 0, 5, b"a", b"1")


def test_sliding_window_specs_open_session_shaped_stores(tmp_path: Path) -> None:
    spec = StoreSpec("moved", STR, JSON, windows=sliding(1000, grace_ms=0))
    layout = window_layout(spec)
    assert layout is not None and layout.segmented and layout.max_ahead_ms == 1001
    store = open_store(spec, tmp_path / "moved", RocksDBEnv(16 * MiB))
    try:
        assert isinstance(store, SessionStore)
    finally:
        store.close()
