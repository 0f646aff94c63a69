"""exactly_once_v2 against the real broker: transactions carry outputs, changelogs and offsets."""

from __future__ import annotations

import orjson
import pytest

from tests.integration.example_app import example_data, wait_profiles_served
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]

EOS = {"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 200}


@pytest.mark.duration(13)
def test_two_exactly_once_workers_produce_exactly_the_reference(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap)
    settings = {**EOS, "bootstrap.servers": own_broker.bootstrap}
    a = worker_factory("a", settings=settings)
    b = worker_factory("b", settings=settings)
    wait_until(
        lambda: a.ready() and b.ready() and a.metric("worker_tasks", kind="active") == 4,
        90,
        message="both ready with four of the eight tasks each",
    )
    wait_profiles_served(data, a)
    data.produce(4000)
    expected_totals, expected_alerts = data.reference()
    wait_until(
        lambda: data.totals_from_changelog(worker_factory.application_id) == expected_totals,
        90,
        message="committed totals equal the reference",
    )
    alerts = data.alerts()  # read_committed
    assert sorted(x["payment_id"] for x in alerts) == sorted(expected_alerts)
    assert a.metric("worker_commits_total", result="committed") > 0
    assert b.metric("worker_commits_total", result="committed") > 0
    assert a.terminate() == 0 and b.terminate() == 0


def test_a_query_during_an_open_transaction_never_sees_its_writes(own_broker, worker_factory):
    data = example_data(own_broker.bootstrap)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": 3000,  # a wide window in which the transaction is open
    }
    w = worker_factory("solo", settings=settings)
    w.wait_ready(90)
    data.produce(1)
    account = data.stream[0][0]
    path = f"/stores/account-totals/keys/{account}"

    def processed_but_uncommitted() -> bool:
        return (
            w.metric("worker_processed_records_total") >= 1
            and w.metric("worker_uncommitted_bytes") > 0
        )

    wait_until(
        processed_but_uncommitted, 30, interval=0.02, message="write buffered, not committed"
    )
    commits_before = w.metric("worker_commits_total", result="committed")
    code, body = w.get(path)
    commits_after = w.metric("worker_commits_total", result="committed")
    assert commits_after == commits_before, "the query fell inside the open transaction"
    assert code == 404, f"uncommitted write visible to a query: {code} {body!r}"

    wait_until(lambda: w.get(path)[0] == 200, 30, message="visible once committed")
    answer = orjson.loads(w.get(path)[1])
    assert answer["value"] == data.reference()[0][account]
    assert answer["value"]["count"] == 1
