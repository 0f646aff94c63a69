"""A TTL store on the real broker stays flat while distinct keys stream through.

``benchmarks.apps:ttl_app`` keeps each key for ``TTL_MS`` of stream time; the input gives
every record a new key and a timestamp ``STEP_MS`` after the previous one, so about
``TTL_MS / STEP_MS`` keys are alive at any stream time, however many went through (the
benchmark ``scans_ttl`` runs 1M keys; this test a scaled-down count). After each chunk
of input: the changelog's live keys (tombstones applied, as compaction and a restore see
it) stay bounded, and once the worker stops, so do the RocksDB stores' entries (keys and
expiry index). The figures are printed (``-s``) and attached to the test report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.apps import TTL_MS, TTL_TOPIC
from benchmarks.ttl_churn import (
    ChangelogTail,
    changelog_topic,
    disk_bytes,
    produce_churn,
    store_dirs,
    stored_entries,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = str(Path(__file__).resolve().parents[2])  # the worker imports benchmarks.apps
PARTITIONS = 2
STEP_MS = 1
CHUNKS = 4
PER_CHUNK = 10_000
ALIVE = TTL_MS // STEP_MS
# Alive keys, plus what the last sweep may have left: the keys of the last batches since
# (a sweep runs at each commit, every commit.interval.ms).
BOUND = 3 * ALIVE


@pytest.mark.duration(30)
def test_a_ttl_store_and_its_changelog_stay_bounded_under_a_churn_of_keys(
    own_broker, worker_factory, record_property
):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    for future in admin.create_topics([NewTopic(TTL_TOPIC, PARTITIONS, 1)]).values():
        future.result(30)
    worker = worker_factory(
        "ttl",
        settings={"bootstrap.servers": own_broker.bootstrap, "commit.interval.ms": 200},
        args=["--app", "benchmarks.apps:ttl_app"],
        env={"PYTHONPATH": REPO},
    )
    worker.wait_ready(60)
    tail = ChangelogTail(own_broker.bootstrap, changelog_topic(worker_factory.application_id))
    report = ["records in | RocksDB bytes | changelog records | changelog live keys"]
    for chunk in range(CHUNKS):
        produce_churn(own_broker.bootstrap, TTL_TOPIC, chunk * PER_CHUNK, PER_CHUNK, STEP_MS)
        done = (chunk + 1) * PER_CHUNK
        wait_until(
            lambda: worker.metric("worker_processed_records_total") >= done,  # noqa: B023
            60,
            message=f"{done} records processed",
        )
        wait_until(lambda: worker.metric("worker_uncommitted_bytes") == 0, 30, message="a commit")
        tail.read()
        size = disk_bytes(store_dirs(worker.state_dir))
        report.append(f"{done} | {size} | {tail.records} | {tail.live}")
        assert tail.live <= BOUND, report
    evicted = sum(
        worker.metric("worker_ttl_evictions_total", task=f"0_{p}", store="recent")
        for p in range(PARTITIONS)
    )
    worker.terminate(30)
    entries = stored_entries(store_dirs(worker.state_dir))
    report.append(f"evicted {evicted:.0f}; RocksDB entries (keys + index) after stop {entries}")
    print("\n".join(report))
    record_property("ttl_churn", "\n".join(report))
    assert evicted >= CHUNKS * PER_CHUNK - BOUND
    assert entries <= 2 * BOUND  # each live key and its index entry
