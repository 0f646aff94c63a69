"""A small topology with stores of every key serde, real RocksDB stores per task, and a
helper that builds the status snapshot the processing thread would publish."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from worker.assignment.task_id import TaskId
from worker.http.queries import QueryRouter
from worker.partitioner import partition_for
from worker.processing import Topology
from worker.processing.built_topology import BuiltTopology
from worker.runtime.status import Routing, Status, StoreStatus, TaskStatus, WorkerState
from worker.serde import BYTES, JSON, STR
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

PARTITIONS = 4
ME = "127.0.0.1:1111"
OTHER = "127.0.0.1:2222"
THIRD = "127.0.0.1:3333"
APP = "app"


def _noop(ctx: Any, key: Any, value: Any) -> None:
    return None


def build_topology() -> BuiltTopology:
    return (
        Topology()
        .add_source("events", "events", key_serde=STR, value_serde=JSON)
        .add_table("labels", "labels", key_serde=STR, value_serde=STR)
        .add_store("counts", key_serde=STR, value_serde=JSON)
        .add_store("tags", key_serde=JSON, value_serde=JSON)
        .add_store("blobs", key_serde=BYTES, value_serde=BYTES)
        .add_processor("p", _noop, parents=["events"], stores=["counts", "tags", "blobs", "labels"])
        .build()
    )


def task_of(key: bytes) -> TaskId:
    return TaskId(0, partition_for(key, PARTITIONS))


def key_on(partition: int, prefix: str = "acct-") -> str:
    """A str key whose task is ``0_<partition>``."""
    n = 0
    while task_of(f"{prefix}{n}".encode()).partition != partition:
        n += 1
    return f"{prefix}{n}"


@dataclass
class Stores:
    """Open stores for every task (0_0..0_3) and every store name, in tmp_path."""

    root: Path
    env: RocksDBEnv
    by_task: dict[TaskId, dict[str, Store]] = field(default_factory=dict)

    def put(self, store: str, key: bytes, value: bytes, offset: int = 0) -> None:
        target = self.by_task[task_of(key)][store]
        target.put(key, value)
        target.commit({(f"{APP}-{store}-changelog", task_of(key).partition): offset})

    def close_all(self) -> None:
        for stores in self.by_task.values():
            for store in stores.values():
                store.close()


@pytest.fixture
def topology() -> BuiltTopology:
    return build_topology()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    opened = Stores(tmp_path, RocksDBEnv(16 * MiB))
    for p in range(PARTITIONS):
        task = TaskId(0, p)
        opened.by_task[task] = {
            name: Store.open(tmp_path / str(task) / name, opened.env, name)
            for name in ("counts", "tags", "blobs", "labels")
        }
    yield opened
    opened.close_all()


def snapshot(
    stores: Stores,
    local: Mapping[str, tuple[str, str] | tuple[str, str, int | None]],
    active_hosts: Mapping[str, list[str]] | None = None,
    standby_hosts: Mapping[str, list[str]] | None = None,
    partitions: Mapping[int, int] | None = None,
    state: WorkerState = WorkerState.RUNNING,
) -> Status:
    """A status with local tasks ``{"0_1": (kind, state[, lag])}`` holding the real stores."""
    tasks = []
    for task_id, spec in sorted(local.items()):
        kind, task_state = spec[0], spec[1]
        lag = spec[2] if len(spec) > 2 else None  # type: ignore[misc]
        tid = TaskId.parse(task_id)
        views = tuple(
            StoreStatus(
                name,
                f"{APP}-{name}-changelog",
                tid.partition,
                store.committed_offsets().get((f"{APP}-{name}-changelog", tid.partition)),
                store,
            )
            for name, store in stores.by_task[tid].items()
        )
        tasks.append(TaskStatus(task_id, kind, task_state, views, lag))
    routing = Routing(
        ME,
        {h: frozenset(map(TaskId.parse, t)) for h, t in (active_hosts or {}).items()},
        {h: frozenset(map(TaskId.parse, t)) for h, t in (standby_hosts or {}).items()},
        7,
        {0: PARTITIONS} if partitions is None else partitions,
    )
    return Status(state, tuple(tasks), 0.0, routing=routing)


class StatusBox:
    """What ``Worker.status`` is to the router: returns the latest published snapshot."""

    def __init__(self, status: Status | None = None) -> None:
        self.current = status or Status()
        self.calls = 0

    def __call__(self) -> Status:
        self.calls += 1
        return self.current


@pytest.fixture
def box() -> StatusBox:
    return StatusBox()


@pytest.fixture
def router(topology: BuiltTopology, box: StatusBox) -> QueryRouter:
    return QueryRouter(topology, box)
