"""exactly_once_v2 against the real broker: transactions carry outputs, changelogs and offsets."""

from __future__ import annotations

import pytest

from tests.integration.example_app import example_data
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

EOS = {"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 200}


def test_two_exactly_once_workers_produce_exactly_the_reference(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap)
    settings = {**EOS, "bootstrap.servers": own_broker.bootstrap}
    a = worker_factory("a", settings=settings)
    b = worker_factory("b", settings=settings)
    wait_until(
        lambda: a.ready() and b.ready() and a.metric("worker_tasks", kind="active") == 2,
        90,
        message="both ready with two tasks each",
    )
    data.produce(4000)
    expected_totals, expected_alerts = data.reference()
    wait_until(
        lambda: data.totals_from_changelog(worker_factory.application_id) == expected_totals,
        90,
        message="committed totals equal the reference",
    )
    alerts = data.alerts()  # read_committed
    assert sorted(x["payment_id"] for x in alerts) == sorted(expected_alerts)
    assert a.metric("worker_commits_total") > 0 and b.metric("worker_commits_total") > 0
    assert a.terminate() == 0 and b.terminate() == 0
