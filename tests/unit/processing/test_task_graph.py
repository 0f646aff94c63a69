"""The task graph and the processor context: routing, store access, forwarding, serdes.

Stores are real RocksDB stores on ``tmp_path``; the record collector is the fake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeCollector, SentRecord
from tests.support.feeding import feed
from worker.errors import TopologyError
from worker.processing import ProcessorContext, Topology
from worker.processing.graph import TaskGraph
from worker.serde import BYTES, JSON, STR, SerdeError
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

Processor = Callable[[ProcessorContext, Any, Any], None]


@pytest.fixture(scope="module")
def env() -> RocksDBEnv:
    return RocksDBEnv(16 * MiB)


class Stores:
    """Opens real stores under one tmp dir and closes them all at the end."""

    def __init__(self, root: Path, env: RocksDBEnv) -> None:
        self._root = root
        self._env = env
        self.opened: dict[str, Store] = {}

    def __call__(self, *names: str) -> dict[str, Store]:
        for name in names:
            self.opened[name] = Store.open(self._root / name, self._env, name)
        return dict(self.opened)

    def close(self) -> None:
        for store in self.opened.values():
            store.close()


@pytest.fixture
def stores(tmp_path: Path, env: RocksDBEnv) -> Iterator[Stores]:
    opened = Stores(tmp_path, env)
    yield opened
    opened.close()


@pytest.fixture
def collector() -> FakeCollector:
    return FakeCollector()


def graph_of(
    topology: Topology, stores: dict[str, Store], collector: FakeCollector, task_id: str = "0_1"
) -> TaskGraph:
    (subtopology,) = topology.build().subtopologies
    return TaskGraph(subtopology, task_id, stores, collector)


def stream(fn: Processor, stores: tuple[str, ...] = ()) -> Topology:
    """``in`` (str keys, JSON values) -> ``p`` = fn, with ``stores`` (JSON) declared."""
    topology = Topology().add_source("in", "input", key_serde=STR, value_serde=JSON)
    for name in stores:
        topology.add_store(name, key_serde=STR, value_serde=JSON)
    return topology.add_processor("p", fn, parents=["in"], stores=list(stores))


T0 = 1_700_000_000_000  # every record's timestamp: outputs carry it


def send(graph: TaskGraph, key: bytes | None, value: bytes | None, offset: int = 0) -> None:
    feed(graph, "input", 1, offset, T0, key, value)


# -- stores --------------------------------------------------------------------------


def test_a_processor_reads_and_writes_the_stores_it_declared(
    stores: Stores, collector: FakeCollector
) -> None:
    def count(ctx: ProcessorContext, key: str, value: Any) -> None:
        counts = ctx.store("counts")
        counts.put(key, (counts.get(key) or 0) + value["n"])

    graph = graph_of(stream(count, ("counts",)), stores("counts"), collector)

    send(graph, b"a", b'{"n": 2}')
    send(graph, b"a", b'{"n": 3}')
    send(graph, b"b", b'{"n": 1}')

    raw = stores.opened["counts"]
    assert dict(raw.pending()) == {b"a": b"5", b"b": b"1"}
    assert raw.get_committed(b"a") is None  # only buffered until the task commits


def test_a_store_view_encodes_with_the_store_serdes_and_none_deletes(
    stores: Stores, collector: FakeCollector
) -> None:
    def write(ctx: ProcessorContext, key: str, value: Any) -> None:
        ctx.store("docs").put(key, value)

    graph = graph_of(stream(write, ("docs",)), stores("docs"), collector)
    raw = stores.opened["docs"]
    raw.put(b"gone", b"1")
    raw.commit({})

    send(graph, b"k", b'{"x": [1, 2]}')
    send(graph, b"gone", None)

    assert dict(raw.pending()) == {b"k": b'{"x":[1,2]}', b"gone": None}
    assert raw.get(b"gone") is None


def test_a_processor_using_a_store_it_did_not_declare_raises_topology_error(
    stores: Stores, collector: FakeCollector
) -> None:
    def sneaky(ctx: ProcessorContext, key: str, value: Any) -> None:
        ctx.store("secret")

    topology = (
        Topology()
        .add_source("in", "input", key_serde=STR, value_serde=JSON)
        .add_store("secret")
        .add_processor("owner", lambda ctx, k, v: None, parents=["in"], stores=["secret"])
        .add_processor("sneaky", sneaky, parents=["in"])
    )
    graph = graph_of(topology, stores("secret"), collector)

    with pytest.raises(TopologyError, match="'sneaky' did not declare store 'secret'"):
        send(graph, b"a", b"{}")


def test_a_store_declared_by_the_parent_is_not_available_to_its_child(
    stores: Stores, collector: FakeCollector
) -> None:
    def child(ctx: ProcessorContext, key: str, value: Any) -> None:
        ctx.store("mine")

    topology = stream(lambda ctx, k, v: ctx.forward(k, v), ("mine",)).add_processor(
        "child", child, parents=["p"]
    )
    graph = graph_of(topology, stores("mine"), collector)

    with pytest.raises(TopologyError, match="'child' did not declare store 'mine'"):
        send(graph, b"a", b"{}")


def test_a_processor_uses_its_stores_again_after_forwarding_to_a_child(
    stores: Stores, collector: FakeCollector
) -> None:
    def parent(ctx: ProcessorContext, key: str, value: Any) -> None:
        ctx.forward(key, value)
        ctx.store("mine").put(key, "after forward")

    topology = stream(parent, ("mine",)).add_processor(
        "child", lambda ctx, k, v: None, parents=["p"]
    )
    graph = graph_of(topology, stores("mine"), collector)

    send(graph, b"a", b"{}")

    assert dict(stores.opened["mine"].pending()) == {b"a": b'"after forward"'}


def test_a_table_is_readable_but_not_writable_by_processors(
    stores: Stores, collector: FakeCollector
) -> None:
    attempts: list[str] = []

    def lookup(ctx: ProcessorContext, key: str, value: Any) -> None:
        profiles = ctx.store("profiles")
        ctx.forward(key, profiles.get(key))
        for name, attempt in [
            ("put", lambda: profiles.put(key, {"hacked": True})),
            ("put None", lambda: profiles.put(key, None)),
            ("delete", lambda: profiles.delete(key)),
        ]:
            with pytest.raises(TopologyError, match="'profiles' is a table"):
                attempt()
            attempts.append(name)

    topology = (
        Topology()
        .add_source("in", "input", key_serde=STR, value_serde=JSON)
        .add_table("profiles", "profiles", key_serde=STR, value_serde=JSON)
        .add_processor("p", lookup, parents=["in"], stores=["profiles"])
        .add_sink("out", "output", parents=["p"], key_serde=STR, value_serde=JSON)
    )
    raw = stores("profiles")
    graph = graph_of(topology, raw, collector)
    feed(graph, "profiles", 1, 0, 0, b"a", b'{"mean": 10}')

    send(graph, b"a", b"{}")

    assert attempts == ["put", "put None", "delete"]
    assert collector.sent == [SentRecord("output", None, b"a", b'{"mean":10}', timestamp=T0)]
    assert dict(raw["profiles"].pending()) == {b"a": b'{"mean": 10}'}


def test_a_graph_needs_every_store_of_its_subtopology_open(
    stores: Stores, collector: FakeCollector
) -> None:
    topology = stream(lambda ctx, k, v: None, ("one", "two"))

    with pytest.raises(TopologyError, match=r"task 0_1: stores not open: \['two'\]"):
        graph_of(topology, stores("one"), collector)


# -- forwarding ----------------------------------------------------------------------


def recorder(seen: list[tuple[str, Any, Any]], name: str) -> Processor:
    def record(ctx: ProcessorContext, key: Any, value: Any) -> None:
        seen.append((name, key, value))

    return record


def test_forward_reaches_every_child(collector: FakeCollector) -> None:
    seen: list[tuple[str, Any, Any]] = []
    topology = (
        stream(lambda ctx, k, v: ctx.forward(k.upper(), v["n"] * 10))
        .add_processor("c1", recorder(seen, "c1"), parents=["p"])
        .add_processor("c2", recorder(seen, "c2"), parents=["p"])
    )
    graph = graph_of(topology, {}, collector)

    send(graph, b"a", b'{"n": 4}')

    assert seen == [("c1", "A", 40), ("c2", "A", 40)]


def test_forward_to_a_named_child_reaches_only_that_child(collector: FakeCollector) -> None:
    seen: list[tuple[str, Any, Any]] = []
    topology = (
        stream(lambda ctx, k, v: ctx.forward(k, v, to="c2"))
        .add_processor("c1", recorder(seen, "c1"), parents=["p"])
        .add_processor("c2", recorder(seen, "c2"), parents=["p"])
    )
    graph = graph_of(topology, {}, collector)

    send(graph, b"a", b"1")

    assert seen == [("c2", "a", 1)]


def test_forward_to_an_unknown_child_raises_topology_error(collector: FakeCollector) -> None:
    seen: list[tuple[str, Any, Any]] = []
    topology = stream(lambda ctx, k, v: ctx.forward(k, v, to="nobody")).add_processor(
        "c1", recorder(seen, "c1"), parents=["p"]
    )
    graph = graph_of(topology, {}, collector)

    with pytest.raises(TopologyError, match="'p' has no child 'nobody'"):
        send(graph, b"a", b"1")
    assert seen == []


def test_forward_from_a_leaf_processor_goes_nowhere(collector: FakeCollector) -> None:
    graph = graph_of(stream(lambda ctx, k, v: ctx.forward(k, v)), {}, collector)

    send(graph, b"a", b"1")

    assert collector.sent == []


def test_records_flow_through_a_chain_of_processors_to_a_sink(collector: FakeCollector) -> None:
    topology = (
        stream(lambda ctx, k, v: ctx.forward(k, v + 1))
        .add_processor("double", lambda ctx, k, v: ctx.forward(k, v * 2), parents=["p"])
        .add_sink("out", "output", parents=["double"], key_serde=STR, value_serde=JSON)
    )
    graph = graph_of(topology, {}, collector)

    send(graph, b"a", b"1")

    assert collector.sent == [SentRecord("output", None, b"a", b"4", timestamp=T0)]


def test_an_error_in_a_processor_propagates_and_the_next_record_runs_normally(
    stores: Stores, collector: FakeCollector
) -> None:
    def flaky(ctx: ProcessorContext, key: str, value: Any) -> None:
        if value == "boom":
            raise RuntimeError("user code failed")
        ctx.store("s").put(key, value)

    topology = (
        stream(lambda ctx, k, v: ctx.forward(k, v))
        .add_store("s", key_serde=STR, value_serde=JSON)
        .add_processor("flaky", flaky, parents=["p"], stores=["s"])
    )
    graph = graph_of(topology, stores("s"), collector)

    with pytest.raises(RuntimeError, match="user code failed"):
        send(graph, b"a", b'"boom"')
    send(graph, b"a", b'"fine"')

    assert dict(stores.opened["s"].pending()) == {b"a": b'"fine"'}


# -- record metadata -----------------------------------------------------------------


def test_the_processor_sees_the_record_metadata_and_task_id(collector: FakeCollector) -> None:
    seen: list[tuple[Any, ...]] = []

    def look(ctx: ProcessorContext, key: Any, value: Any) -> None:
        seen.append((ctx.task_id, ctx.topic, ctx.partition, ctx.offset, ctx.timestamp, ctx.headers))

    graph = graph_of(stream(look), {}, collector, task_id="0_7")
    headers = [("trace", b"abc")]

    feed(graph, "input", 7, 42, 1_700_000_000_123, b"a", b"1", headers)
    feed(graph, "input", 7, 43, 1_700_000_000_456, b"b", b"2")

    assert seen == [
        ("0_7", "input", 7, 42, 1_700_000_000_123, headers),
        ("0_7", "input", 7, 43, 1_700_000_000_456, None),
    ]


def test_a_child_sees_the_metadata_of_the_record_that_reached_its_parent(
    collector: FakeCollector,
) -> None:
    seen: list[int] = []
    topology = stream(lambda ctx, k, v: ctx.forward(k, v)).add_processor(
        "child", lambda ctx, k, v: seen.append(ctx.offset), parents=["p"]
    )
    graph = graph_of(topology, {}, collector)

    send(graph, b"a", b"1", offset=9)

    assert seen == [9]


# -- sinks ---------------------------------------------------------------------------


def test_sinks_serialise_with_their_serdes_and_hand_bytes_to_the_collector(
    collector: FakeCollector,
) -> None:
    topology = (
        stream(lambda ctx, k, v: ctx.forward(k, v))
        .add_sink("as-json", "json-out", parents=["p"], key_serde=STR, value_serde=JSON)
        .add_sink("as-str", "str-out", parents=["p"], key_serde=JSON, value_serde=STR)
    )
    graph = graph_of(topology, {}, collector)

    send(graph, b"k", b'"v"')
    send(graph, b"gone", b"null")

    assert collector.sent == [
        SentRecord("json-out", None, b"k", b'"v"', timestamp=T0),
        SentRecord("str-out", None, b'"k"', b"v", timestamp=T0),
        SentRecord("json-out", None, b"gone", None, timestamp=T0),
        SentRecord("str-out", None, b'"gone"', None, timestamp=T0),
    ]
    assert collector.changelog == []


def test_a_sink_can_read_a_source_directly(collector: FakeCollector) -> None:
    topology = Topology().add_source("in", "input").add_sink("copy", "output", parents=["in"])
    graph = graph_of(topology, {}, collector)

    send(graph, b"k", b"\x00\xff")

    assert collector.sent == [SentRecord("output", None, b"k", b"\x00\xff", timestamp=T0)]


# -- tables --------------------------------------------------------------------------


def table_only(collector: FakeCollector, stores: Stores) -> tuple[TaskGraph, Store]:
    topology = Topology().add_table("t", "table-topic", key_serde=STR, value_serde=JSON)
    opened = stores("t")
    return graph_of(topology, opened, collector), opened["t"]


def test_table_records_upsert_the_store_and_a_null_value_deletes(
    stores: Stores, collector: FakeCollector
) -> None:
    graph, raw = table_only(collector, stores)
    raw.put(b"old", b'"x"')
    raw.commit({})

    feed(graph, "table-topic", 0, 0, 0, b"a", b"1")
    feed(graph, "table-topic", 0, 1, 0, b"a", b"2")
    feed(graph, "table-topic", 0, 2, 0, b"b", b"3")
    feed(graph, "table-topic", 0, 3, 0, b"old", None)

    assert dict(raw.pending()) == {b"a": b"2", b"b": b"3", b"old": None}
    assert raw.get(b"old") is None
    assert collector.sent == []


def test_null_key_table_records_are_ignored(stores: Stores, collector: FakeCollector) -> None:
    graph, raw = table_only(collector, stores)

    feed(graph, "table-topic", 0, 0, 0, None, b"1")
    feed(graph, "table-topic", 0, 1, 0, None, None)

    assert dict(raw.pending()) == {}


def test_a_table_with_children_forwards_each_update_after_storing_it(
    stores: Stores, collector: FakeCollector
) -> None:
    seen: list[tuple[Any, Any, bytes | None]] = []

    def watch(ctx: ProcessorContext, key: Any, value: Any) -> None:
        seen.append((key, value, ctx.store("t").get(key) and b"stored"))

    topology = (
        Topology()
        .add_table("t", "table-topic", key_serde=STR, value_serde=JSON)
        .add_processor("watch", watch, parents=["t"], stores=["t"])
    )
    graph = graph_of(topology, stores("t"), collector)

    feed(graph, "table-topic", 0, 0, 0, b"a", b"1")
    feed(graph, "table-topic", 0, 1, 0, b"a", None)

    assert seen == [("a", 1, b"stored"), ("a", None, None)]


def test_null_key_table_records_reach_neither_the_store_nor_the_tables_children(
    stores: Stores, collector: FakeCollector
) -> None:
    seen: list[Any] = []
    topology = (
        Topology()
        .add_table("t", "table-topic", key_serde=STR, value_serde=JSON)
        .add_processor("watch", lambda ctx, k, v: seen.append((k, v)), parents=["t"])
    )
    opened = stores("t")
    graph = graph_of(topology, opened, collector)

    feed(graph, "table-topic", 0, 0, 0, None, b"1")

    assert dict(opened["t"].pending()) == {}
    assert seen == []  # Kafka Streams drops a null-key table record entirely


# -- serde errors --------------------------------------------------------------------


def test_an_undecodable_source_key_raises_serde_error(collector: FakeCollector) -> None:
    graph = graph_of(stream(lambda ctx, k, v: None), {}, collector)

    with pytest.raises(SerdeError, match="not UTF-8"):
        send(graph, b"\xff\xfe", b"1")


def test_an_undecodable_source_value_raises_serde_error(collector: FakeCollector) -> None:
    graph = graph_of(stream(lambda ctx, k, v: None), {}, collector)

    with pytest.raises(SerdeError, match="not JSON"):
        send(graph, b"a", b"{not json")


def test_a_sink_value_its_serde_cannot_encode_raises_serde_error(collector: FakeCollector) -> None:
    topology = stream(lambda ctx, k, v: ctx.forward(k, object())).add_sink(
        "out", "output", parents=["p"], key_serde=STR, value_serde=JSON
    )
    graph = graph_of(topology, {}, collector)

    with pytest.raises(SerdeError, match="not JSON-serialisable"):
        send(graph, b"a", b"1")
    assert collector.sent == []


def test_a_sink_key_its_serde_cannot_encode_raises_serde_error(collector: FakeCollector) -> None:
    topology = stream(lambda ctx, k, v: ctx.forward(123, v)).add_sink(
        "out", "output", parents=["p"], key_serde=STR, value_serde=BYTES
    )
    graph = graph_of(topology, {}, collector)

    with pytest.raises(SerdeError, match="str serde needs str"):
        send(graph, b"a", b"1")


def test_a_store_value_its_serde_cannot_encode_raises_serde_error(
    stores: Stores, collector: FakeCollector
) -> None:
    graph = graph_of(
        stream(lambda ctx, k, v: ctx.store("s").put(k, {1, 2}), ("s",)), stores("s"), collector
    )

    with pytest.raises(SerdeError):
        send(graph, b"a", b"1")
    assert dict(stores.opened["s"].pending()) == {}


def test_an_undecodable_stored_value_raises_serde_error_on_read(
    stores: Stores, collector: FakeCollector
) -> None:
    opened = stores("s")
    opened["s"].put(b"a", b"{broken")
    graph = graph_of(stream(lambda ctx, k, v: ctx.store("s").get(k), ("s",)), opened, collector)

    with pytest.raises(SerdeError, match="not JSON"):
        send(graph, b"a", b"1")
