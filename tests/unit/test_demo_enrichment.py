"""The demo's check of the example app's joins fails on a wrong enrichment: a profile of
another time, other merchant data, a payment missing or unexpected."""

from __future__ import annotations

from typing import Any

from worker.dev import demo_enrichment, enrichment, sample_data

ACCOUNTS = sample_data.accounts(10)
CHANGES = enrichment.changing(ACCOUNTS, 2, 100, 50)
CLOCK = sample_data.EventClock(1_000_000, 1_000)
PROFILES = enrichment.ProfileHistory.of(ACCOUNTS, 0, CHANGES, CLOCK.at)
MERCHANTS = enrichment.merchant_reference()
STREAM = list(sample_data.payments(ACCOUNTS, 300, changes=CHANGES))
WANT = sample_data.reference(PROFILES, STREAM, CLOCK, 1, MERCHANTS).enriched


def got(**replaced: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {**{pid: dict(value) for pid, value in WANT.items()}, **replaced}


def before_change() -> tuple[str, dict[str, Any]]:
    """A payment of a changing account made before its change: the first profile."""
    for n, (account, payment) in enumerate(STREAM):
        if account in CHANGES and n < CHANGES[account].from_n:
            return payment["id"], WANT[payment["id"]]
    raise AssertionError("the sample has no such payment")


def test_the_reference_itself_passes_and_joins_both_profiles_of_a_changing_account() -> None:
    assert demo_enrichment.check(WANT, got()) == {}
    changing = [v["profile"] for v in WANT.values() if v["payment"]["account"] in CHANGES]
    assert len({p["mean"] for p in changing}) == 2 * len(CHANGES)


def test_the_latest_profile_instead_of_the_one_as_of_the_payment_fails_the_check() -> None:
    pid, value = before_change()
    latest = PROFILES.latest()[value["payment"]["account"]]
    assert latest != value["profile"]

    problems = demo_enrichment.check(WANT, got(**{pid: {**value, "profile": latest}}))

    assert problems == {"wrong profile": [pid]}


def test_other_merchant_data_or_none_fails_the_check() -> None:
    pid, value = before_change()
    other = {**value, "merchant": MERCHANTS["merchant-00"] if value["merchant"] is None else None}

    assert demo_enrichment.check(WANT, got(**{pid: other})) == {"wrong merchant": [pid]}


def test_a_missing_or_an_unexpected_payment_fails_the_check() -> None:
    pid, value = before_change()
    short = got()
    del short[pid]

    assert demo_enrichment.check(WANT, short) == {"missing": [pid]}
    assert demo_enrichment.check(WANT, got(**{"p-x": value})) == {"extra": ["p-x"]}
