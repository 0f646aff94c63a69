"""Random bytes and text through the example app's serdes, its tasks and the query path.

No input may crash anything: serdes decode or raise SerdeError; the task manager, with
both exception handlers on ``log_and_continue``, processes or skips every record and
commits past all of them; a key lookup, direct or over HTTP, answers a clean JSON status.
``--hypothesis-seed`` replays a run.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes import FakeCollector
from tests.unit.tasks.conftest import make_harness
from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.config import Settings
from worker.examples import payments as app
from worker.http.queries import QueryRouter
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.runtime.status import Routing, Status, StoreStatus, TaskStatus, WorkerState
from worker.serde import SerdeError
from worker.state.directory import StateDirectory
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store
from worker.tasks.state import TaskState
from worker.tasks.task_context import TaskContext

APP = "fuzz"
PARTITIONS = 2
TOPOLOGY: BuiltTopology = app.build().build(APP).build()
SUBTOPOLOGY = TOPOLOGY.subtopologies[0]  # the scoring one: plain and windowed stores
SERDES = {
    serde
    for subtopology in TOPOLOGY.subtopologies
    for spec in (*subtopology.sources, *subtopology.stores)
    for serde in (spec.key_serde, spec.value_serde)
}

json_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=16)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | json_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_text, inner, max_size=4),
    max_leaves=10,
)
# Random bytes, text, JSON of any shape and payment-like objects with wrong fields.
payloads = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=32).map(lambda t: t.encode("utf-8", "surrogatepass")),
    json_values.map(orjson.dumps),
    st.fixed_dictionaries(
        {"id": json_values, "account": json_values, "amount_cents": json_values}
    ).map(orjson.dumps),
)
maybe = st.none() | payloads


@settings(max_examples=300, deadline=None)
@given(data=payloads)
def test_the_example_apps_serdes_decode_any_bytes_or_raise_serde_error(data: bytes) -> None:
    for serde in SERDES:
        try:
            value = serde.deserialize(data)
        except SerdeError:
            continue
        if value is None:
            continue  # JSON null: "no value", which serialises to None (a delete) by design
        try:
            again = serde.serialize(value)
        except SerdeError:
            continue
        assert serde.deserialize(again) == value


@pytest.fixture
def fuzz_harness(tmp_path: Path) -> Iterator[Any]:
    settings_ = Settings.model_validate(
        {
            "application.id": APP,
            "default.deserialization.exception.handler": "log_and_continue",
            "processing.exception.handler": "log_and_continue",
            "max.record.bytes": 48,  # some of the random records are over it
        }
    )
    clock = FakeClock()
    state_dir = StateDirectory(tmp_path / "state", APP, clock)
    state_dir.open()
    metrics = Metrics()
    env = RocksDBEnv(16 * MiB)
    ctx = TaskContext(settings_, state_dir, env, FakeCollector(), metrics, clock)  # type: ignore[arg-type]
    harness = make_harness(TOPOLOGY, ctx)
    # The scoring sub-topology's tasks: the joins' need the global store, which the
    # harness does not hold (their bad input: tests/unit/test_example_app.py's driver).
    tasks = frozenset(TaskId(SUBTOPOLOGY.id, p) for p in range(PARTITIONS))
    harness.manager.on_assigned(Assignment(tasks, frozenset(), frozenset(), {}, {}, generation=1))
    harness.restore()
    try:
        yield harness
    finally:
        harness.manager.close_all(clean=False)
        state_dir.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=st.lists(
        st.tuples(st.just(app.PAYMENTS), st.integers(0, 1), maybe, maybe),
        min_size=1,
        max_size=6,
    )
)
def test_the_worker_processes_or_skips_any_bytes_on_the_example_apps_topics(
    fuzz_harness: Any, records: list[tuple[str, int, bytes | None, bytes | None]]
) -> None:
    h = fuzz_harness  # one running pair of tasks for the whole test; records accumulate
    for topic, partition, key, value in records:
        h.consumer.append(topic, partition, key, value)

    for _ in range(200):  # process, revive and retry, skip: never an exception
        h.restore()
        if h.process() == 0 and not h.tasks.restoring():
            break
    h.commits.commit()

    assert all(t.state is TaskState.RUNNING for t in h.manager.tasks.values())
    ends = {tp: h.consumer.end_offset(tp) for tp in h.consumer.logs}
    assert {tp: h.group_offsets.offsets.get(tp) for tp in ends} == ends, (
        "committed past every record"
    )


# -- the query path ------------------------------------------------------------------


@pytest.fixture(scope="module")
def query_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[QueryRouter, int]]:
    """A router and an HTTP server over real stores: two running active tasks, one key each."""
    root = Path(tmp_path_factory.mktemp("queries"))
    env = RocksDBEnv(16 * MiB)
    opened: list[Store] = []
    tasks = []
    for p in range(PARTITIONS):
        views = []
        for spec in SUBTOPOLOGY.stores:
            store = Store.open(root / f"0_{p}" / spec.name, env, spec.name)
            opened.append(store)
            changelog = spec.changelog(APP)
            store.put(b"acct-1", b'{"count":1,"sum_cents":5}')
            store.put(b"not-json", b"\xff{")  # what a table topic may hold
            store.commit({(changelog, p): 0})
            views.append(StoreStatus(spec.name, changelog, p, 0, store))
        tasks.append(TaskStatus(f"0_{p}", "active", "running", tuple(views)))
    routing = Routing("127.0.0.1:1", partitions={0: PARTITIONS})
    status = Status(WorkerState.RUNNING, tuple(tasks), heartbeat=0.0, routing=routing)
    router = QueryRouter(TOPOLOGY, lambda: status)
    server = HttpServer("127.0.0.1", 0, Metrics(), lambda: status, router)
    server.start()
    try:
        yield router, server.port
    finally:
        server.stop()
        for store in opened:
            store.close()


CLEAN = {200, 400, 404}
stores = st.sampled_from([spec.name for spec in SUBTOPOLOGY.stores] + ["nope", ""])


@settings(max_examples=300, deadline=None)
@given(store=stores, key=st.text(max_size=40), stale=st.booleans())
def test_any_key_text_gets_a_clean_answer_from_the_query_router(
    query_world: tuple[QueryRouter, int], store: str, key: str, stale: bool
) -> None:
    router, _port = query_world

    reply = router.get(store, key, stale, f"/stores/{store}/keys/{quote(key)}")

    assert reply.status in CLEAN, reply
    orjson.dumps(reply.body)  # always a JSON answer


@settings(max_examples=150, deadline=None)
@given(key=st.binary(max_size=40), store=st.binary(max_size=12), query=st.binary(max_size=12))
def test_any_bytes_in_a_query_url_get_a_clean_answer_over_http(
    query_world: tuple[QueryRouter, int], key: bytes, store: bytes, query: bytes
) -> None:
    _router, port = query_world
    path = f"/stores/{quote(store, safe='')}/keys/{quote(key, safe='')}?{quote(query, safe='=&')}"

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()

    assert status in CLEAN, (status, body)
    assert isinstance(orjson.loads(body), dict)


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(["acct-1", "not-json"]))
def test_a_stored_value_that_does_not_decode_is_a_json_error_not_a_crash(
    query_world: tuple[QueryRouter, int], key: str
) -> None:
    router, _port = query_world
    for spec in SUBTOPOLOGY.stores:
        reply = router.get(spec.name, key, False, f"/stores/{spec.name}/keys/{key}")
        assert reply.status == (200 if key == "acct-1" else 500), reply
        assert "does not decode" in str(reply.body) or reply.status == 200
