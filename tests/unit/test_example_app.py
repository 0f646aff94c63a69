"""The payments example app: its pure scoring functions and its topology over sample data.

The topology runs in a TaskGraph over in-memory stores and the fake collector, and must
reach exactly the result of ``sample_data.reference`` (the same check ``make demo`` and
the integration tests make against a real broker).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.aggregating import Running
from worker.dev import demo_enrichment, enrichment, sample_data
from worker.dev.enrichment import ProfileHistory
from worker.examples import payments as app
from worker.examples import windowed
from worker.testing import TopologyTestDriver

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
    assert app.next_totals(current, paying(250), 5_000) == {
        "count": 1,
        "sum_cents": 250,
        "last_payment_ms": 5_000,
        "quiet_alerted": False,
    }


def test_each_payment_adds_one_and_its_amount_and_clears_the_quiet_marker() -> None:
    before = {"count": 4, "sum_cents": 1_000, "last_payment_ms": 10, "quiet_alerted": True}

    totals = app.next_totals(before, paying(250), 20)

    assert totals == {"count": 5, "sum_cents": 1_250, "last_payment_ms": 20, "quiet_alerted": False}


def test_a_payment_older_than_the_last_counts_but_keeps_the_last_payment_and_marker() -> None:
    before = {"count": 4, "sum_cents": 1_000, "last_payment_ms": 10, "quiet_alerted": True}

    totals = app.next_totals(before, paying(250), 5)

    assert totals == {"count": 5, "sum_cents": 1_250, "last_payment_ms": 10, "quiet_alerted": True}


# -- quiet_alert ---------------------------------------------------------------------


def test_an_account_is_quiet_at_the_first_check_boundary_after_the_quiet_time() -> None:
    last = 10 * app.QUIET_CHECK_MS + 1  # just after a boundary
    at = app.quiet_at(last)
    totals = app.next_totals(None, PAYMENT, last)

    assert at == last - 1 + app.QUIET_AFTER_MS + app.QUIET_CHECK_MS
    assert app.quiet_alert("acct-1", totals, at - 1) is None
    assert app.quiet_alert("acct-1", totals, at) == {
        "account": "acct-1",
        "last_payment_ms": last,
        "quiet_at_ms": at,
    }


def test_an_account_alerted_for_its_last_payment_or_never_paying_is_not_quiet() -> None:
    alerted = {**app.next_totals(None, PAYMENT, 0), "quiet_alerted": True}

    assert app.quiet_alert("acct-1", alerted, 10 * app.QUIET_AFTER_MS) is None
    assert app.quiet_alert("acct-1", None, 10 * app.QUIET_AFTER_MS) is None
    assert app.quiet_alert("acct-1", {"count": 1, "sum_cents": 1}, 10**12) is None


def test_recent_keys_sort_by_account_then_time() -> None:
    keys = [app.recent_key("acct-2", 5, "p-1"), app.recent_key("acct-1", 900, "p-2")]
    keys.append(app.recent_key("acct-1", 10_000, "p-0"))

    assert sorted(keys) == [keys[1], keys[2], keys[0]]


# -- the topology ----------------------------------------------------------------------


def test_the_example_scores_payments_in_one_subtopology_and_joins_them_in_another() -> None:
    scoring, joins = app.build().build("payments-app").build().subtopologies
    hop = f"payments-app-{app.JOIN}-repartition"

    assert scoring.source_topics == (app.PAYMENTS,)
    assert scoring.changelog_topics("payments-app") == {
        app.TOTALS: "payments-app-account-totals-changelog",
        app.RECENT: "payments-app-recent-payments-changelog",
        windowed.STORE: "payments-app-busy-10m-changelog",
    }
    assert [s.topic for s in scoring.sinks] == [app.QUIET, app.BUSY, hop]
    assert set(joins.source_topics) == {app.PROFILES, hop}
    assert joins.changelog_topics("payments-app") == {
        app.PROFILES: "payments-app-account-profiles-changelog"  # versioned: a log of its own
    }
    assert [s.topic for s in joins.sinks] == [app.ENRICHED, app.ALERTS]


def test_the_app_over_sample_data_equals_the_reference_computation() -> None:
    """The whole app in the test driver over two partitions, with profiles that change
    during the payments (loaded first, as the demo does) and a merchant without reference
    data: every output equals the reference's, each enriched payment carrying the profile
    of its time."""
    accounts = sample_data.accounts(25)
    quiet = sample_data.going_quiet(accounts, 2, 500, 500)
    changes = enrichment.changing(accounts, 3, 400, 400)
    stream = list(
        sample_data.payments(accounts, 1_500, anomaly_rate=0.03, quiet=quiet, changes=changes)
    )
    clock = sample_data.EventClock(1_000_000, 60_000)  # 25 h: gaps past the quiet time
    profiles = enrichment.ProfileHistory.of(accounts[:-3], 0, changes, clock.at)  # 3 have none
    merchants = enrichment.merchant_reference()
    want = sample_data.reference(profiles, stream, clock, 2, merchants)

    with TopologyTestDriver(app.build(), {"application.id": "app"}, partitions=2) as d:
        records, stamps = profiles.records()
        d.input_topic(app.PROFILES).pipe_many(
            [(*r, t) for r, t in zip(records, stamps, strict=True)]
        )
        d.input_topic(app.MERCHANTS).pipe_many([(m, v, 0) for m, v in merchants.items()])
        d.input_topic(app.PAYMENTS).pipe_many(
            [(account, payment, clock.at(n)) for n, (account, payment) in enumerate(stream)]
        )
        enriched = [v for _, v in d.output_topic(app.ENRICHED).read_key_values()]
        alerts = [v for _, v in d.output_topic(app.ALERTS).read_key_values()]
        quiet_alerts = [v for _, v in d.output_topic(app.QUIET).read_key_values()]
        totals = dict(d.store(app.TOTALS).all())

    assert demo_enrichment.check(want.enriched, demo_enrichment.by_payment(enriched)) == {}
    assert len(enriched) == len(stream)  # each once
    later = [v for v in want.enriched.values() if v["payment"]["account"] in changes]
    assert {v["profile"]["mean"] for v in later} == {
        m for a in changes for m in (profiles.versions[a][0][1]["mean"], changes[a].mean)
    }  # payments of a changing account joined both of its profiles
    assert sum(v["merchant"] is None for v in enriched) > 0  # the merchant with no data
    assert {a["payment_id"]: a for a in alerts} == want.alerts
    assert len(alerts) == len(want.alerts) >= 20  # the sample exercises the alert path
    assert {sample_data.quiet_id(a): a for a in quiet_alerts} == want.quiet
    assert set(quiet) <= {a["account"] for a in quiet_alerts}
    assert totals == want.totals


def test_the_busy_accounts_of_sample_payments_equal_the_reference_computation(
    tmp_path: Path,
) -> None:
    """Records and the task's punctuations: each closed 10-minute window with more than
    ``BUSY_PAYMENTS`` payments alerted once, bursts and chance alike."""
    accounts = sample_data.accounts(25)
    bursts = sample_data.bursting(accounts, 2, 500, 1000, 600)
    stream = list(sample_data.payments(accounts, 3_000, bursts=bursts))
    clock = sample_data.EventClock(1_000_000, 2_000)  # 100 minutes
    task = Running(app.build().build("payments-app").build(), tmp_path)
    try:
        for n, (account, payment) in enumerate(stream):
            task.feed(account, payment, clock.at(n))
        outputs = task.outputs(app.BUSY)
    finally:
        task.close()

    want = sample_data.reference(ProfileHistory({}), stream, clock, partitions=1).busy
    assert {windowed.alert_id(o.value): o.value for o in outputs} == want
    assert len(outputs) == len(want)  # each once
    assert set(bursts) <= {a["account"] for a in want.values()}  # the bursts are busy
    assert all(o.key.key == o.value["account"] and not o.headers for o in outputs)


def test_the_joins_guide_shows_the_example_apps_joins_as_written() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "joins.md").read_text()
    found = re.search(r"## The example app[^\n]*\n.*?```python\n(.*?)```", guide, re.S)
    assert found
    source = Path(app.__file__).read_text()
    assert textwrap.indent(found.group(1), "    ") in source
