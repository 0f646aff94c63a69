"""Window and session queries: committed live windows only, routed like key queries,
merged per partition without a key, and 400s naming the problem."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.http.conftest import ME, OTHER, PARTITIONS, StatusBox, Stores, key_on, snapshot
from worker.assignment.task_id import TaskId
from worker.http.queries import QueryRouter
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.processing import Topology
from worker.processing.built_topology import BuiltTopology
from worker.serde import JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.window_stores import FixedWindowStore, SessionStore
from worker.tasks.stores import open_store

MINUTE = 60_000
TP = ("app-per-minute-changelog", 0)


def build() -> BuiltTopology:
    return (
        Topology()
        .add_source("events", "events", STR, JSON)
        .add_window_store(
            "per-minute",
            MINUTE,
            grace_ms=0,
            retention_ms=3 * MINUTE,
            key_serde=STR,
            value_serde=JSON,
        )
        .add_session_store("visits", 1000, grace_ms=0, key_serde=STR, value_serde=JSON)
        .add_store("counts", STR, JSON)
        .add_processor(
            "p", lambda c, k, v: None, ["events"], stores=["per-minute", "visits", "counts"]
        )
        .build()
    )


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    opened = Stores(tmp_path, RocksDBEnv(16 * MiB))
    built = build()
    for p in range(PARTITIONS):
        task = TaskId(0, p)
        opened.by_task[task] = {
            spec.name: open_store(spec, tmp_path / str(task) / spec.name, opened.env)
            for spec in built.subtopologies[0].stores
        }
    yield opened
    opened.close_all()


@pytest.fixture
def server(box: StatusBox) -> Iterator[HttpServer]:
    """A server whose ``route`` answers as ``GET`` would (started and stopped, so its
    socket is released)."""
    running = HttpServer("127.0.0.1", 0, Metrics(), box, QueryRouter(build(), box))
    running.start()
    yield running
    running.stop()


def windows_of(stores: Stores, partition: int) -> FixedWindowStore:
    store = stores.by_task[TaskId(0, partition)]["per-minute"]
    assert isinstance(store, FixedWindowStore)
    return store


def fill(stores: Stores, key: str, minutes: range, partition: int) -> None:
    store = windows_of(stores, partition)
    for minute in minutes:
        store.put_window(key.encode(), minute * MINUTE, b"%d" % minute, minute * MINUTE)
    store.commit({TP: minute})


ALL_HERE = {"0_0": ("active", "running"), "0_1": ("active", "running"),
            "0_2": ("active", "running"), "0_3": ("active", "running")}  # fmt: skip


def test_a_key_windows_are_the_committed_live_ones_by_start(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    key = key_on(1)
    fill(stores, key, range(6), 1)  # observed 5 min, retention 3: starts 2..5 are live
    windows_of(stores, 1).put_window(key.encode(), 5 * MINUTE, b"99", 5 * MINUTE)  # uncommitted
    box.current = snapshot(stores, ALL_HERE, {ME: list(ALL_HERE)})
    reply = server.route(f"/stores/per-minute/windows?key={key}&from=0&to={10 * MINUTE}")
    assert reply.status == 200, reply.body
    assert [(w["start"], w["end"], w["value"]) for w in reply.body["windows"]] == [
        (m * MINUTE, (m + 1) * MINUTE, m) for m in range(2, 6)
    ]
    assert reply.body["observed_ms"] == 5 * MINUTE and reply.body["stale"] is False
    limited = server.route(f"/stores/per-minute/windows?key={key}&limit=1")
    assert len(limited.body["windows"]) == 1 and limited.body["more"] is True


def test_a_key_owned_elsewhere_is_redirected(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    key = key_on(2)
    box.current = snapshot(stores, {}, {OTHER: ["0_2"]})
    reply = server.route(f"/stores/per-minute/windows?key={key}")
    assert reply.status == 307
    location = f"http://{OTHER}/stores/per-minute/windows?key={key}&hop=1"
    assert reply.headers["Location"] == location


def test_without_a_key_the_local_partitions_are_merged_and_the_others_named(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    fill(stores, key_on(0), range(2), 0)
    fill(stores, key_on(1), range(1, 3), 1)
    local = {"0_0": ("active", "running"), "0_1": ("active", "running")}
    box.current = snapshot(stores, local, {ME: ["0_0", "0_1"], OTHER: ["0_2", "0_3"]})
    reply = server.route("/stores/per-minute/windows?from=0&to=600000")
    assert reply.status == 200, reply.body
    assert [w["start"] for w in reply.body["windows"]] == [0, MINUTE, MINUTE, 2 * MINUTE]
    assert reply.body["elsewhere"] == {"2": OTHER, "3": OTHER}
    assert reply.body["complete"] is False
    assert reply.body["observed_ms"] == {"0": MINUTE, "1": 2 * MINUTE}
    one = server.route("/stores/per-minute/windows?partition=3")
    assert one.status == 307


def test_sessions_of_a_key(server: HttpServer, box: StatusBox, stores: Stores) -> None:
    key = key_on(3)
    sessions = stores.by_task[TaskId(0, 3)]["visits"]
    assert isinstance(sessions, SessionStore)
    sessions.put_session(key.encode(), 10, 500, b"2", 500)
    sessions.put_session(key.encode(), 2000, 2100, b"3", 2100)
    sessions.commit({("app-visits-changelog", 3): 1})
    box.current = snapshot(stores, ALL_HERE, {ME: list(ALL_HERE)})
    reply = server.route(f"/stores/visits/sessions?key={key}&from=600&to=5000")
    assert reply.status == 200, reply.body
    assert reply.body["sessions"] == [{"key": key, "start": 2000, "end": 2100, "value": 3}]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/stores/per-minute/windows?from=5&to=4", "after"),
        ("/stores/per-minute/windows?from=x", "integer"),
        ("/stores/per-minute/windows?limit=5000", "maximum"),
        ("/stores/per-minute/windows?color=red", "unknown"),
        ("/stores/visits/sessions?from=0", "key= is required"),
        ("/stores/visits/windows?key=a", "sessions store"),
        ("/stores/counts/windows?key=a", "key-value store"),
    ],
)
def test_bad_queries_are_400s_naming_the_problem(
    server: HttpServer, box: StatusBox, stores: Stores, path: str, problem: str
) -> None:
    box.current = snapshot(stores, ALL_HERE, {ME: list(ALL_HERE)})
    reply = server.route(path)
    assert reply.status == 400 and problem in reply.body["error"], reply.body
