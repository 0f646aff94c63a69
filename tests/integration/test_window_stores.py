"""Windowed stores on the broker: the changelog topic's configs, a restart after kill -9
restores only the tail, and a cold restore keeps only the windows inside retention.

Both guarantees: under exactly-once the changelog carries transaction markers, and the
offsets stored with the data are the transactions' (the same atomic commit). The app
(``tests.apps.windowed``) counts per key per minute in a store kept two minutes;
the input spans 20 minutes of event time, so most windows have expired by the end.
"""

from __future__ import annotations

import shutil
import time
from collections import defaultdict
from pathlib import Path

import confluent_kafka as ck
import orjson
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.apps import windowed
from tests.support.kafka_io import read_partition
from worker.partitioner import partition_for
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.window_format import OBSERVED_MS, decode_fixed_key, decode_meta, is_meta_key
from worker.state.window_store import WindowLayout
from worker.state.window_stores import FixedWindowStore

PARTITIONS = 2
RECORDS = 1200
KEYS = 40
APP = "tests.apps.windowed:build"
REPO = str(Path(__file__).resolve().parents[2])  # the worker processes import tests.apps
MARGIN_MS = 3_600_000
LAYOUT = WindowLayout(
    segmented=False,
    retention_ms=windowed.RETENTION_MS,
    size_ms=windowed.MINUTE,
    advance_ms=windowed.MINUTE,
)


def produce_events(bootstrap: str, topic: str, first_ms: int) -> list[tuple[str, int]]:
    """One record a second over 20 minutes of event time, keys round-robin."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    events = [(f"k{i % KEYS:02d}", first_ms + i * 1000) for i in range(RECORDS)]
    for i, (key, ts) in enumerate(events):
        producer.produce(topic, orjson.dumps({"i": i}), key.encode(), timestamp=ts)
    assert producer.flush(30) == 0
    return events


def live_windows(events: list[tuple[str, int]]) -> int:
    """Windows a task keeps: start >= its observed time (largest timestamp) - retention."""
    by_partition: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for key, ts in events:
        by_partition[partition_for(key.encode(), PARTITIONS)].append((key, ts))
    live = 0
    for found in by_partition.values():
        observed = max(ts for _k, ts in found)
        starts = {(k, ts // windowed.MINUTE * windowed.MINUTE) for k, ts in found}
        live += sum(1 for _k, start in starts if start >= observed - windowed.RETENTION_MS)
    return live


def expired_records(bootstrap: str, changelog: str) -> int:
    """The window records of ``changelog`` expired at the last observed time of their
    partition: every one a cold restore skips."""
    expired = 0
    for partition in range(PARTITIONS):
        records = [
            (key, value)
            for _offset, key, value in read_partition(bootstrap, changelog, partition)
            if key is not None and value is not None
        ]
        observed = max(decode_meta(value, -1) for key, value in records if key == OBSERVED_MS)
        live_from = observed - windowed.RETENTION_MS
        expired += sum(
            1 for key, _ in records if not is_meta_key(key) and decode_fixed_key(key)[0] < live_from
        )
    return expired


def windows_on_disk(state_dir: Path) -> int:
    env = RocksDBEnv(16 * MiB)
    count = 0
    for path in state_dir.glob(f"*/*/rocksdb/{windowed.PER_MINUTE}"):
        store = FixedWindowStore.open_windowed(path, env, windowed.PER_MINUTE, LAYOUT)
        try:
            count += sum(1 for key, _ in store.iter_committed() if not is_meta_key(key))
        finally:
            store.close()
    return count


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_window_store_restores_its_tail_and_only_live_windows(worker_factory, guarantee) -> None:  # type: ignore[no-untyped-def]
    bootstrap = worker_factory.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"{worker_factory.application_id}-events"
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    settings = {
        "processing.guarantee": guarantee,
        "commit.interval.ms": 200,
        "windowstore.changelog.additional.retention.ms": MARGIN_MS,
    }
    env = {"PYTHONPATH": REPO, windowed.EVENTS_VARIABLE: topic}
    w = worker_factory("w", settings=settings, args=["--app", APP], env=env)
    w.wait_ready(60)
    now_minute = int(time.time() * 1000) // windowed.MINUTE * windowed.MINUTE
    events = produce_events(bootstrap, topic, now_minute - 25 * windowed.MINUTE)
    w.wait_for_metric("worker_processed_records_total", lambda n: n >= RECORDS, 120)
    w.wait_for_metric("worker_uncommitted_bytes", lambda n: n == 0, 30)  # all committed

    changelog = f"{worker_factory.application_id}-{windowed.PER_MINUTE}-changelog"
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["retention.ms"].value == str(windowed.RETENTION_MS + MARGIN_MS)

    assert w.kill() == -9
    w.start()
    w.wait_ready(120)
    # Every commit stored its changelog offset with the data: nothing (or the last
    # commit's few records) comes back, not the changelog's history.
    assert w.metric("worker_restored_records_total") < 100
    code, body = w.get(f"/stores/{windowed.PER_MINUTE}/windows?limit=1000")
    assert code == 200
    before = orjson.loads(body)

    assert w.terminate() == 0
    shutil.rmtree(w.state_dir)
    w.start()
    w.wait_ready(120)
    restored = w.metric("worker_restored_records_total")
    # The changelog's tail told the restore where it ends: every window expired by then
    # was skipped, whatever batch it came in.
    skipped = w.metric("worker_window_restore_skipped_records_total")
    assert skipped == expired_records(bootstrap, changelog) > 0
    code, body = w.get(f"/stores/{windowed.PER_MINUTE}/windows?limit=1000")
    answer = orjson.loads(body)
    assert code == 200 and answer["complete"], answer
    assert answer["windows"] == before["windows"]
    key = events[-1][0]
    code, body = w.get(f"/stores/{windowed.PER_MINUTE}/windows?key={key}")
    assert code == 200 and orjson.loads(body)["windows"] == [
        window for window in answer["windows"] if window["key"] == key
    ]
    assert w.terminate() == 0
    on_disk = windows_on_disk(w.state_dir)
    expected = live_windows(events)
    all_windows = len({(k, ts // windowed.MINUTE) for k, ts in events})
    assert on_disk == expected == len(answer["windows"]), (on_disk, expected, restored)
    assert expected < all_windows / 5  # the history held far more
