"""A versioned table on the real broker drops the history no read reaches, also for keys
never written again.

Ten keys get two versions a second apart; then one more key is written past the
history, which moves the store's cutoff past every first version. No key is written
again, yet the commits' history sweeps delete each first version with a changelog
tombstone (the changelog, tombstones applied, holds no first version), count it in
``worker_versioned_pruned_total``, and leave the store holding the newest versions
alone; a stream record as of a time inside the history still joins the version valid
then.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from benchmarks.kafka_io import create_topics, produce
from tests.integration.versioned_app import HISTORY_MS, STORE, TOPICS_ENV
from tests.support.kafka_io import read_partition
from tests.support.waiting import wait_until
from worker.serde import STR
from worker.state import versioned_format as fmt
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.versioned_store import VersionedStore

pytestmark = pytest.mark.integration

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
KEYS = [f"k{i}" for i in range(10)]


def stored(state_dir: Path) -> list[bytes]:
    """Every key of the versioned store on disk; the worker must have stopped."""
    (path,) = [p for p in state_dir.rglob(STORE) if p.parent.name == "rocksdb"]
    store = VersionedStore.open_versioned(path, RocksDBEnv(16 * MiB), STORE, HISTORY_MS)
    try:
        with store.scan() as entries:
            return [key for key, _ in entries]
    finally:
        store.close()


@pytest.mark.duration(20)
def test_old_versions_of_keys_never_written_again_leave_the_store_and_its_changelog(
    own_broker, worker_factory
):
    suffix = uuid.uuid4().hex[:8]
    table, stream, out = f"vt-{suffix}", f"vs-{suffix}", f"vo-{suffix}"
    create_topics(own_broker.bootstrap, {table: 1, stream: 1, out: 1})
    first = int(time.time() * 1000) - 3_600_000
    versions = [(STR.serialize(k), STR.serialize(f"{k}-v{n}")) for n in (1, 2) for k in KEYS]
    times = [first + 1000 * n for n in (0, 1) for _ in KEYS]
    produce(own_broker.bootstrap, table, versions, timestamps=times)
    later = first + 1000 + HISTORY_MS + 1  # the cutoff passes every first version
    produce(own_broker.bootstrap, table, [(b"z", b"z-v1")], timestamps=[later])
    worker = worker_factory(
        "versioned",
        settings={"bootstrap.servers": own_broker.bootstrap, "commit.interval.ms": 200},
        args=["--app", "tests.integration.versioned_app:build"],
        env={TOPICS_ENV: f"{table},{stream},{out}", "PYTHONPATH": REPO},
    )
    worker.wait_ready(60)
    pruned = lambda: worker.metric("worker_versioned_pruned_total", task="0_0", store=STORE)  # noqa: E731
    wait_until(lambda: pruned() >= len(KEYS), 60, message="the first versions pruned")
    assert pruned() == len(KEYS)

    produce(own_broker.bootstrap, stream, [(b"k3", b"pay")], timestamps=[later - 10])
    wait_until(lambda: read_partition(own_broker.bootstrap, out, 0), 30, message="a join")
    ((_offset, _key, joined),) = read_partition(own_broker.bootstrap, out, 0)
    assert joined == b"pay|k3-v2"  # as of its time: the second version, still there

    wait_until(lambda: worker.metric("worker_uncommitted_bytes") == 0, 30, message="a commit")
    live: set[bytes] = set()  # the changelog's keys, tombstones applied (as compaction)
    topic = f"{worker_factory.application_id}-{STORE}-changelog"
    for _offset, key, value in read_partition(own_broker.bootstrap, topic, 0):
        assert key is not None
        if value is None:
            live.discard(key)
        else:
            live.add(key)
    history = {fmt.history_key(k.encode(), first) for k in KEYS}
    assert not live & history
    assert {fmt.latest_key(k.encode()) for k in [*KEYS, "z"]} <= live

    worker.terminate(30)
    on_disk = stored(worker.state_dir)
    assert not set(on_disk) & history
    assert sorted(on_disk) == sorted(
        [fmt.latest_key(k.encode()) for k in [*KEYS, "z"]] + [fmt.OBSERVED_MS]
    )
