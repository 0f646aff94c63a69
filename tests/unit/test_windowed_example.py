"""The windowed example app (worker/examples/windowed.py) through the task graph: busy
accounts alerted once per closed window, exactly as its reference computation says."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tests.support.aggregating import Running
from worker.examples import windowed
from worker.windowed_serde import Windowed

MINUTE = 60_000


def payment(n: int, account: str, cents: int) -> dict[str, Any]:
    return {"id": f"p{n}", "account": account, "amount_cents": cents}


def run(payments: list[tuple[int, dict[str, Any]]], tmp_path: Path) -> list[Any]:
    task = Running(windowed.build().build().build(), tmp_path)
    try:
        for ts, p in payments:
            task.feed(p["account"], p, ts)
        return [(o.key, o.value, o.timestamp, o.headers) for o in task.outputs()]
    finally:
        task.close()


def test_an_account_over_the_threshold_is_alerted_once_per_closed_window(
    tmp_path: Path,
) -> None:
    busy = [(10 * MINUTE + n * 1000, payment(n, "acct-1", 100)) for n in range(21)]
    quiet = [(10 * MINUTE + n * 1000, payment(100 + n, "acct-2", 100)) for n in range(20)]
    later = [(30 * MINUTE, payment(999, "acct-3", 1))]  # stream time closes them all

    outputs = run(busy + quiet + later, tmp_path)

    # the busy payments lie in the two windows starting at minutes 5 and 10
    assert [o[0] for o in outputs] == [
        Windowed("acct-1", m * MINUTE, (m + 10) * MINUTE) for m in (5, 10)
    ]
    assert outputs[0][1] == {
        "account": "acct-1",
        "from": 5 * MINUTE,
        "to": 15 * MINUTE,
        "payments": 21,
        "sum_cents": 2100,
    }
    assert all(ts == 10 * MINUTE + 20_000 and not headers for _k, _v, ts, headers in outputs)


def test_the_alerts_match_the_reference_computation(tmp_path: Path) -> None:
    rng = random.Random(22)
    payments = []
    ts = 0
    for n in range(600):
        ts += rng.randrange(0, 4_000)
        account = f"acct-{rng.randrange(4)}"
        payments.append((ts, payment(n, account, rng.randrange(1, 10_000))))

    outputs = run(payments, tmp_path)

    expected = windowed.expected_alerts(payments, ts)
    assert expected, "the data makes some alerts"
    assert len(outputs) == len(expected)
    assert {key: value for key, value, _ts, _h in outputs} == expected
