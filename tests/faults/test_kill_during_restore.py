"""kill -9 in the middle of a restore: the next start resumes where the last batch ended."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from worker.config import load
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

PARTITIONS = 2
RECORDS = 600_000
BATCH = 2000
APP = "worker.examples.counting:build"


@pytest.mark.duration(10)
def test_a_restore_killed_midway_resumes_from_its_last_written_batch(own_broker, worker_factory):
    settings = load(None, {"bootstrap.servers": own_broker.bootstrap}, environ={}).settings
    changelog = f"{worker_factory.application_id}-{counting.COUNTS}-changelog"
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    topics = [
        NewTopic(counting.INPUTS, PARTITIONS, 1),
        NewTopic(counting.OUTPUTS, PARTITIONS, 1),
        NewTopic(changelog, PARTITIONS, 1, config={"cleanup.policy": "compact"}),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    # A long changelog history, as a previous owner of these tasks would have left.
    history = ((f"k{i % 50_000:05d}", i) for i in range(RECORDS))
    assert produce_records(settings, changelog, history, STR, JSON) == RECORDS

    w = worker_factory(
        "w",
        settings={"bootstrap.servers": own_broker.bootstrap, "restore.batch.records": BATCH},
        args=["--app", APP],
    )
    w.wait_for_metric("worker_restored_records_total", lambda n: n > RECORDS // 6, 120)
    first = w.metric("worker_restored_records_total")  # progress can only grow until the kill
    assert w.kill() == -9
    assert first < RECORDS, "killed before the restore finished"

    w.start()
    w.wait_ready(120)
    second = w.metric("worker_restored_records_total")
    # Everything restored before the kill was written with its offset, batch by batch: only
    # what the first run had not yet written (at most one batch per partition) comes again.
    assert second <= RECORDS - first + BATCH * PARTITIONS, (first, second)
    assert 0 < second < RECORDS, "the tail was restored, not the whole changelog again"
