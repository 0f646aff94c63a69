"""A DSL topology that re-keys, joins and re-keys again, with one output per input on each
of its two output topics, so exactly-once across a join between two repartition hops is
checkable record by record (tests/faults/test_join_rekey_crash_loop.py).

``jr-payments`` (key: a card, value: ``{"id": n, "account": a, "amount": x}``)
-> ``select_key`` the account (through ``<application.id>-enrich-repartition``)
-> left join, as of the payment's time, with the versioned table ``jr-accounts`` (store
``accounts``, a day of history, key: an account, value: ``{"region": r}``;
co-partitioned with the payments) -> ``jr-enriched`` (key: the account, value: the
payment with its account's region then, ``"none"`` when it had no row) -> ``group_by``
the region (through ``<application.id>-by-region-repartition``) -> per region, the
number and the sum of the amounts of its payments so far and the last payment's id, in
store ``region-totals`` -> ``jr-region-totals`` (key: the region, value: ``{"id": n,
"count": c, "amount": s}``).
"""

from __future__ import annotations

from typing import Any

from worker.dsl import StreamsBuilder

PAYMENTS = "jr-payments"
ACCOUNTS = "jr-accounts"
ENRICHED = "jr-enriched"
TOTALS_OUT = "jr-region-totals"
ACCOUNTS_STORE = "accounts"
TOTALS = "region-totals"
NO_REGION = "none"
HISTORY_MS = 86_400_000


def enrich(payment: dict[str, Any], account: dict[str, Any] | None) -> dict[str, Any]:
    return {**payment, "region": account["region"] if account else NO_REGION}


def add(region: str, payment: dict[str, Any], totals: dict[str, int]) -> dict[str, int]:
    return {
        "id": payment["id"],
        "count": totals["count"] + 1,
        "amount": totals["amount"] + payment["amount"],
    }


def build() -> StreamsBuilder:
    builder = StreamsBuilder()
    accounts = builder.table(ACCOUNTS, name=ACCOUNTS_STORE, history_ms=HISTORY_MS)
    enriched = (
        builder.stream(PAYMENTS)
        .select_key(lambda card, payment: payment["account"])
        .left_join(accounts, enrich, name="enrich")
    )
    enriched.to(ENRICHED)
    (
        enriched.group_by(lambda account, payment: payment["region"], name="by-region")
        .aggregate(lambda: {"id": -1, "count": 0, "amount": 0}, add, name=TOTALS)
        .to_stream()
        .to(TOTALS_OUT)
    )
    return builder
