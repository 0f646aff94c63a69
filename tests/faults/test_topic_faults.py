"""A changelog deleted under a running worker: a clear error, not silent loss.

(Missing and mis-sized topics at start-up are tests/integration/test_startup_errors.py.)
The test broker even acknowledges writes to a deleted topic, so without the worker's
periodic topic check the loss would go unnoticed.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from worker.config import load
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

APP = "worker.examples.counting:build"


@pytest.mark.duration(11)
def test_a_changelog_deleted_under_a_running_worker_stops_it_naming_the_topic(
    own_broker, worker_factory
):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    topics = [NewTopic(t, 2, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
    for future in admin.create_topics(topics).values():
        future.result(30)
    settings = load(None, {"bootstrap.servers": own_broker.bootstrap}, environ={}).settings
    worker = worker_factory(
        "w",
        settings={"bootstrap.servers": own_broker.bootstrap, "num.standby.replicas": 0},
        args=["--app", APP],
    )
    worker.wait_ready(90)
    produce_records(settings, counting.INPUTS, [("k", {"id": i}) for i in range(50)], STR, JSON)
    worker.wait_for_metric("worker_processed_records_total", lambda v: v >= 50, 30)
    changelog = f"{worker_factory.application_id}-{counting.COUNTS}-changelog"

    for future in admin.delete_topics([changelog]).values():
        future.result(30)

    assert worker.wait_exit(60) == 1
    errors = [line for line in worker.logs().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, worker.log_tail()
    assert f"changelog {changelog} was deleted while the worker ran" in errors[0], errors[0]
