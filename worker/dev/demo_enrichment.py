"""The demo's check of the example app's joins: ``enriched-payments`` read back and held
against the reference, payment by payment.

Each payment must be there once (a record repeated, as an aborted transaction's on the
dev broker, counts once), carrying the profile of its account valid at its time (the
stream-table join with the versioned ``account-profiles``) and its merchant's reference
data (the global-table join with ``merchant-reference``); the check fails on any other
profile, other merchant data, a missing or an unexpected payment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from worker.config import Settings
from worker.dev.enrichment import ProfileHistory, wrong_enrichments
from worker.examples import payments as app
from worker.kafka.loader import read_topic

Enriched = dict[str, dict[str, Any]]  # payment id -> enriched-payments value


def by_payment(values: Iterable[dict[str, Any]]) -> Enriched:
    """Enriched payments by payment id."""
    return {str(v.get("payment", {}).get("id")): v for v in values}


def enriched_payments(settings: Settings) -> tuple[Enriched, int]:
    """What ``enriched-payments`` holds, and its number of records."""
    values = [orjson.loads(v) for _, v in read_topic(settings, app.ENRICHED) if v]
    return by_payment(values), len(values)


def check(
    want: Mapping[str, dict[str, Any]], got: Mapping[str, dict[str, Any]]
) -> dict[str, list[str]]:
    """The problems found (empty lists when ``got`` is what ``want`` says), by kind."""
    return {kind: ids for kind, ids in wrong_enrichments(want, got).items() if ids}


def describe(
    want: Mapping[str, dict[str, Any]], got: Mapping[str, dict[str, Any]], profiles: ProfileHistory
) -> str:
    """What the enrichment holds, for the summary line: how many payments the reference
    gives a later profile than their account's first (the as-of reading at work) and no
    merchant data (the left join's miss)."""
    later = 0
    for value in want.values():
        first = profiles.versions.get(value["payment"]["account"], [(0, None)])[0][1]
        later += value.get("profile") != first
    misses = sum(1 for value in want.values() if value.get("merchant") is None)
    return (
        f"{len(got)} payments (reference: {len(want)}; {later} with a later profile than "
        f"their account's first, {misses} with no merchant data)"
    )
