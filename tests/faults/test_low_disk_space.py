"""Low disk space is warned of before the disk is full: a real worker whose threshold
(``state.disk.min.free.bytes``) is above what its disk has free."""

from __future__ import annotations

import shutil

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.waiting import wait_until
from worker.examples import counting

pytestmark = pytest.mark.faults


def test_low_disk_space_is_a_gauge_and_a_warning_before_the_disk_is_full(
    own_broker, worker_factory
):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    topics = [NewTopic(t, 2, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
    for future in admin.create_topics(topics).values():
        future.result(30)
    worker = worker_factory(
        "low",
        settings={"bootstrap.servers": own_broker.bootstrap, "state.disk.min.free.bytes": 2**62},
        args=["--app", "worker.examples.counting:build"],
    )
    worker.wait_ready(90)

    free = wait_until(
        lambda: worker.metric("worker_state_dir_free_bytes") or None, 30, 0.2, "the gauge"
    )
    on_disk = shutil.disk_usage(worker.state_dir).free
    assert abs(free - on_disk) < 0.5 * on_disk + 2**30, (free, on_disk)  # others write too
    warned = wait_until(
        lambda: [e for e in worker.log_events() if e.get("event") == "state.low_disk_space"],
        30,
        0.2,
        "the low-space warning",
    )
    assert warned[0]["min_free_bytes"] == 2**62 and warned[0]["free_bytes"] > 0
    assert worker.healthy() and worker.terminate() == 0
