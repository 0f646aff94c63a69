"""Two real worker processes run the example app against the real broker: the payments
enriched by its two joins (the profile as of each payment's time, the merchant's
reference data), alerts, totals, quiet-account alerts (a stream-time punctuator), the last hour's payments (a TTL store)
and the busy accounts (an emit-final windowed aggregation) match the plain-Python
reference."""

from __future__ import annotations

import pytest

from tests.integration.example_app import example_data, wait_profiles_served
from tests.support.waiting import wait_until
from worker.dev import demo_enrichment, sample_data
from worker.examples import payments as app
from worker.examples import windowed

pytestmark = pytest.mark.integration

FAST = {"commit.interval.ms": 500}


@pytest.mark.duration(14)
def test_two_workers_split_the_tasks_and_match_the_reference(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap, changing=4)
    settings = {**FAST, "bootstrap.servers": own_broker.bootstrap}
    a = worker_factory("a", settings=settings)
    b = worker_factory("b", settings=settings)
    wait_until(
        lambda: (
            a.ready()
            and b.ready()
            and a.metric("worker_tasks", kind="active") == 4
            and b.metric("worker_tasks", kind="active") == 4
        ),
        timeout=90,
        message="both workers ready with four of the eight tasks each (scoring and joins)",
    )
    wait_profiles_served(data, a)
    data.produce(4000)
    wait_until(
        lambda: (
            a.metric("worker_processed_records_total") + b.metric("worker_processed_records_total")
            >= 2 * len(data.stream)  # scored, then joined through the repartition topic
        ),
        timeout=90,
        message="every payment processed twice",
    )
    assert a.metric("worker_processed_records_total") > 0
    assert b.metric("worker_processed_records_total") > 0

    expected_totals, expected_alerts = data.reference()
    assert expected_alerts, "the sample data should contain anomalies"
    wait_until(lambda: len(data.alerts()) >= len(expected_alerts), 30, message="alerts")
    alerts = data.alerts()
    assert sorted(x["payment_id"] for x in alerts) == sorted(expected_alerts)
    assert {x["payment_id"]: x for x in alerts} == expected_alerts

    assert a.terminate() == 0 and b.terminate() == 0
    expected = data.expected()
    enriched = data.enriched()
    assert demo_enrichment.check(expected.enriched, demo_enrichment.by_payment(enriched)) == {}
    assert len(enriched) == len(data.stream)  # each payment once
    later = {
        x["payment"]["id"]
        for x in enriched
        if x["profile"] != data.history.at(x["payment"]["account"], 0)
    }
    assert later, "some payments of the changing accounts joined their second profile"
    assert data.totals_from_changelog(worker_factory.application_id) == expected_totals
    quiet = data.quiet_alerts()
    assert {sample_data.quiet_id(x): x for x in quiet} == expected.quiet
    assert len(quiet) == len(expected.quiet)  # none twice
    assert set(data.quiet) <= {x["account"] for x in quiet}  # the accounts that stopped
    recent = data.store_from_changelog(worker_factory.application_id, app.RECENT)
    assert all(recent.get(k) == v for k, v in expected.recent.items())  # the last hour
    assert all(expected.written.get(k) == v for k, v in recent.items())  # older: swept or not
    assert len(recent) < len(expected.written)  # some expired and tombstoned
    busy = data.busy_alerts()
    assert {windowed.alert_id(x): x for x in busy} == expected.busy
    assert len(busy) == len(expected.busy)  # each window once
    assert set(data.bursts) <= {x["account"] for x in busy}  # the bursts are busy


@pytest.mark.duration(12)
def test_a_clean_restart_restores_nothing_that_was_committed(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap)
    w = worker_factory("solo", settings={**FAST, "bootstrap.servers": own_broker.bootstrap})
    w.wait_ready(90)
    data.produce(2000)
    # Each payment twice (scored, then joined through the repartition topic), and the profiles.
    wait_until(
        lambda: w.metric("worker_processed_records_total") >= 2 * 2000 + 60, 60, message="processed"
    )
    # First start read the profiles (60 accounts) into the versioned table and restored
    # nothing: its changelog, a log of its own, was empty.
    assert w.metric("worker_restored_records_total", store="account-profiles") == 0
    assert w.terminate() == 0
    checkpoints = sorted(w.state_dir.glob("*/*/.checkpoint"))
    assert len(checkpoints) == 8, "clean shutdown writes a .checkpoint per task"

    data.produce(500)  # input written while it is down; its changelogs do not move
    w.start()
    w.wait_ready(90)
    wait_until(lambda: w.metric("worker_processed_records_total") >= 500, 60, message="resumed")
    assert w.metric("worker_restored_records_total") == 0
    _, expected_alerts = data.reference()
    wait_until(lambda: len(data.alerts()) >= len(expected_alerts), 30, message="alerts")
    assert {x["payment_id"] for x in data.alerts()} == set(expected_alerts)
