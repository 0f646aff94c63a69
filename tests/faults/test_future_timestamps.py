"""One payment stamped a century ahead, sent into the example app between normal ones.

Before ``timestamp.max.future.ms`` such a record was valid: it moved its partition's
stream time into the next century, which expired the partition's TTL store, closed its
windows and made every later payment late, for good (issue 32). Now it is an invalid
timestamp: dead-lettered here, and the app's every output (alerts, totals, quiet and busy
alerts, the last hour's payments) matches the reference computed without it.
"""

from __future__ import annotations

import pytest

from tests.integration.example_app import example_data
from tests.support.transaction_log import read_committed_topic
from tests.support.waiting import wait_until
from worker.dev import sample_data
from worker.examples import payments as app
from worker.examples import windowed
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = pytest.mark.faults

CENTURY_MS = 100 * 365 * 86_400_000


@pytest.mark.duration(14)
def test_a_far_future_payment_is_dead_lettered_and_breaks_nothing(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "commit.interval.ms": 500,
        "default.deserialization.exception.handler": "dead_letter",
    }
    worker = worker_factory("w", settings=settings)
    worker.wait_ready(90)
    data.produce(1500)
    # Every partition gets one: whichever partition the account lands in is covered.
    future = data.clock.times(len(data.stream), 1)[0] + CENTURY_MS
    strays = [
        (a.id, {"id": f"future-{a.id}", "account": a.id, "amount_cents": 1}) for a in data.accounts
    ]
    produce_records(
        data.settings, app.PAYMENTS, strays, STR, JSON, timestamps=[future] * len(strays)
    )
    data.produce(1500)

    wait_until(
        lambda: worker.metric("worker_processed_records_total") >= len(data.stream),
        90,
        message="every normal payment processed",
    )
    worker.wait_for_metric(
        "worker_skipped_records_total", lambda v: v == len(strays), 30, reason="invalid_timestamp"
    )
    assert worker.metric("worker_late_records_total") == 0, "nothing came late after it"
    stream_times = [v for _, _, v in worker.metric_samples("worker_task_stream_time_ms")]
    assert stream_times and max(stream_times) < future - CENTURY_MS + 3_600_000, stream_times

    expected_totals, expected_alerts = data.reference()
    wait_until(lambda: len(data.alerts()) >= len(expected_alerts), 30, message="alerts")
    assert {x["payment_id"]: x for x in data.alerts()} == expected_alerts
    assert worker.terminate() == 0
    assert data.totals_from_changelog(worker_factory.application_id) == expected_totals
    expected = data.expected()
    assert {sample_data.quiet_id(x): x for x in data.quiet_alerts()} == expected.quiet
    recent = data.store_from_changelog(worker_factory.application_id, app.RECENT)
    assert all(recent.get(k) == v for k, v in expected.recent.items()), "no early expiry"
    assert {windowed.alert_id(x): x for x in data.busy_alerts()} == expected.busy
    letters = [
        r
        for _, r in read_committed_topic(
            own_broker.bootstrap, f"{worker_factory.application_id}-dlq", 4
        )
    ]
    assert len(letters) == len(strays)
    assert {dict(r.headers)["__worker.errors.reason"] for r in letters} == {b"invalid_timestamp"}
    assert all(
        b"timestamp.max.future.ms" in dict(r.headers)["__worker.errors.message"] for r in letters
    )
