"""The payments example app: its pure scoring functions and its topology over sample data.

The topology runs in a TaskGraph over in-memory stores and the fake collector, and must
reach exactly the result of ``sample_data.reference`` (the same check ``make demo`` and
the integration tests make against a real broker).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.fakes import DictStore, FakeCollector
from tests.support.feeding import feed
from worker.dev import sample_data
from worker.examples import payments as app
from worker.processing.graph import TaskGraph
from worker.serde import JSON, STR

PAYMENT = {"id": "p-1", "account": "acct-1", "amount_cents": 1_000}


def profile(mean: float = 1_000.0, std: float = 100.0, n: int = app.MIN_HISTORY) -> dict[str, Any]:
    return {"mean": mean, "std": std, "n": n}


def paying(amount: int) -> dict[str, Any]:
    return {**PAYMENT, "amount_cents": amount}


# -- alert_for -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "account_profile",
    [
        None,
        {},
        {"mean": 1_000.0, "std": 100.0},  # no history count
        profile(n=app.MIN_HISTORY - 1),
        profile(std=0.0),
        profile(std=-5.0),
    ],
    ids=["no-profile", "empty-profile", "no-n", "small-history", "zero-std", "negative-std"],
)
def test_no_alert_without_a_usable_profile_however_far_the_amount(
    account_profile: dict[str, Any] | None,
) -> None:
    assert app.alert_for(paying(10_000_000), account_profile) is None


def test_no_alert_just_inside_the_threshold() -> None:
    assert app.alert_for(paying(1_399), profile()) is None
    assert app.alert_for(paying(601), profile()) is None


def test_an_alert_exactly_at_the_threshold_names_the_payment_and_the_profile() -> None:
    alert = app.alert_for(paying(1_400), profile())

    assert alert == {
        "payment_id": "p-1",
        "account": "acct-1",
        "amount_cents": 1_400,
        "mean": 1_000.0,
        "std": 100.0,
        "z": app.ALERT_Z,
    }


def test_payments_far_below_the_mean_alert_with_a_negative_z() -> None:
    alert = app.alert_for(paying(100), profile())

    assert alert is not None
    assert alert["z"] == -9.0


@pytest.mark.parametrize(("amount", "z"), [(1_000, 333.0), (100, 33.0), (29, 9.333), (26, 8.333)])
def test_the_alert_z_score_is_rounded_to_three_decimals(amount: int, z: float) -> None:
    alert = app.alert_for(paying(amount), profile(mean=1.0, std=3.0))

    assert alert is not None
    assert alert["z"] == z


# -- next_totals ---------------------------------------------------------------------


@pytest.mark.parametrize("current", [None, {}], ids=["none", "empty"])
def test_the_first_payment_starts_the_totals(current: dict[str, Any] | None) -> None:
    assert app.next_totals(current, paying(250)) == {"count": 1, "sum_cents": 250}


def test_each_payment_adds_one_and_its_amount() -> None:
    totals = app.next_totals({"count": 4, "sum_cents": 1_000}, paying(250))

    assert totals == {"count": 5, "sum_cents": 1_250}


# -- the topology ----------------------------------------------------------------------


def test_the_example_topology_is_one_subtopology_over_both_topics() -> None:
    (st,) = app.build().build().subtopologies

    assert st.source_topics == (app.PAYMENTS, app.PROFILES)
    assert st.changelog_topics("payments-app") == {
        app.PROFILES: app.PROFILES,
        app.TOTALS: "payments-app-account-totals-changelog",
    }
    assert [s.topic for s in st.sinks] == [app.ALERTS]


def test_the_topology_over_sample_payments_equals_the_reference_computation() -> None:
    accounts = sample_data.accounts(25)
    profiles = dict(sample_data.profiles(accounts[:-3]))  # three accounts have no profile
    stream = list(sample_data.payments(accounts, 3_000, anomaly_rate=0.03))
    (subtopology,) = app.build().build().subtopologies
    stores = {app.PROFILES: DictStore(app.PROFILES), app.TOTALS: DictStore(app.TOTALS)}
    collector = FakeCollector()
    graph = TaskGraph(subtopology, "0_0", stores, collector)

    for offset, (account, value) in enumerate(profiles.items()):
        feed(graph, app.PROFILES, 0, offset, 0, account.encode(), JSON.serialize(value))
    for offset, (account, payment) in enumerate(stream):
        feed(graph, app.PAYMENTS, 0, offset, 0, account.encode(), JSON.serialize(payment))

    want_totals, want_alerts = sample_data.reference(profiles, stream)
    totals = {k.decode(): orjson.loads(v) for k, v in stores[app.TOTALS].data.items()}
    alerts = {}
    for record in collector.sent:
        assert record.topic == app.ALERTS
        alert = orjson.loads(record.value or b"")
        assert STR.deserialize(record.key) == alert["account"]
        alerts[alert["payment_id"]] = alert
    assert len(alerts) == len(collector.sent)  # one alert per unusual payment
    assert totals == want_totals
    assert alerts == want_alerts
    assert len(want_alerts) >= 20  # the sample really exercises the alert path
    assert sum(t["count"] for t in totals.values()) == len(stream)
