"""docs/spark.md's history load, run as written: each profile valid from its own time.

The guide's ``profiles.csv`` and its ``worker spark load table ... --timestamp-column``
command (real Spark, local mode, in its own process group) load two versions of one
account's profile and one of another's into the example app's ``account-profiles``,
each stamped with its row's ``valid_from``, while a worker of the example app runs. It
then enriches
payments with the profile of their own time, as the guide's table says: one made before
an account's first profile gets none, one between two versions the older, one after the
last the newest; all of it in the past, which a load stamping the time it writes could
never give. ``worker spark export --timestamp-column`` then gives each account's newest
profile with the time it is valid from.
"""

from __future__ import annotations

import re
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.kafka_io import produce
from tests.support.kafka_io import read_partition
from tests.support.waiting import wait_until
from worker.config import load
from worker.dev.sample_data import create_example_topics
from worker.examples import payments as app

pytest.importorskip("pyspark", reason="the spark extra is not installed (make install has it)")

import pyarrow.parquet as pq  # noqa: E402  (the spark extra's)

from tests.support.process_groups import run_group  # noqa: E402

# Spark's local JVM beside the suite's Kafka JVMs: the timeout only catches a hang.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
SECTION = "## Record timestamps: loading a table's history"
PARTITIONS = 4


def guide_example() -> tuple[str, list[str], list[tuple[str, str, Any]]]:
    """The section's CSV, its command's arguments after ``worker``, and its table of
    (account, payment time, profile or None)."""
    text = GUIDE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```csv\n(.*?)```.*?```sh\n(.*?)```", text, re.S)
    assert found, f"no csv and sh example under {SECTION!r} in {GUIDE}"
    csv, command = found.groups()
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[0] == "worker"
    expected = [
        (row[1].strip("` "), row[2].strip(), row[3])
        for row in (line.split("|") for line in text.splitlines())
        if len(row) == 5 and row[1].strip().startswith("`acct")
    ]
    profiles = [
        (a, at, None if "(`None`)" in p else orjson.loads(p.strip(" `"))) for a, at, p in expected
    ]
    return csv, argv[1:], profiles


def millis(time: str | datetime) -> int:
    """Epoch ms of an ISO time or a datetime (naive: UTC, as Parquet's INT96 reads)."""
    at = datetime.fromisoformat(time) if isinstance(time, str) else time
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)


def enriched(bootstrap: str) -> dict[str, Any]:
    """The enriched payments by payment id: the profile each was joined with."""
    out = [v for p in range(PARTITIONS) for _, _, v in read_partition(bootstrap, app.ENRICHED, p)]
    return {e["payment"]["id"]: e["profile"] for e in map(orjson.loads, out) if e}


@pytest.mark.brokers("kafka")  # a transaction per partition
@pytest.mark.duration(210)
def test_the_guides_history_load_serves_each_payment_the_profile_of_its_time(
    own_broker, worker_factory, tmp_path
):
    bootstrap = own_broker.bootstrap
    create_example_topics(load(None, {"bootstrap.servers": bootstrap}, environ={}).settings, 4)
    csv, args, expected = guide_example()
    (tmp_path / "profiles.csv").write_text(csv)
    args = [str(tmp_path / a) if a == "profiles.csv" else a for a in args]
    # Running while the history loads: records stamped months ago make Kafka roll the
    # table's segments at once (segment.ms counts from the records' times), and its log
    # cleaner then compacts each key down to its newest version within a minute; the
    # versioned store keeps what the worker read in its own changelog.
    worker = worker_factory("history", settings={"bootstrap.servers": bootstrap})
    worker.wait_ready(120)

    done = run_group(
        [sys.executable, "-m", "worker", *args, "--set", f"bootstrap.servers={bootstrap}"],
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    rows = csv.count("\n") - 1
    assert done.stdout.startswith(f"loaded {rows} rows into {app.PROFILES} ({rows} upserts")
    # Each account's last payment in the guide comes after its newest profile.
    newest = {a: p for a, _, p in sorted(expected, key=lambda e: e[1]) if p is not None}

    def served(account: str) -> bool:  # a payment read before its profile would join none
        try:
            status, body = worker.get(f"/stores/{app.PROFILES}/keys/{account}")
        except OSError:
            return False
        return status == 200 and orjson.loads(body).get("value") == newest[account]

    wait_until(lambda: all(map(served, newest)), 90, message="the newest profiles served")
    payments = [
        (account, {"id": f"p{i}", "account": account, "merchant": "m-none", "amount_cents": 1})
        for i, (account, _, _) in enumerate(expected)
    ]
    produce(
        bootstrap,
        app.PAYMENTS,
        [(account.encode(), orjson.dumps(payment)) for account, payment in payments],
        timestamps=[millis(at) for _, at, _ in expected],
    )

    wait_until(lambda: len(enriched(bootstrap)) == len(expected), 90, message="every payment")
    assert enriched(bootstrap) == {f"p{i}": profile for i, (_, _, profile) in enumerate(expected)}

    exported = tmp_path / "profiles.parquet"
    done = run_group(
        [
            sys.executable, "-m", "worker", "spark", "export", app.PROFILES,
            "--to", str(exported), "--timestamp-column", "valid_from",
            "--set", f"bootstrap.servers={bootstrap}",
        ],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pq.read_table(exported).to_pylist()
    newest_from: dict[str, int] = {}
    for line in csv.splitlines()[1:]:
        account, *_, valid_from = line.split(",")
        newest_from[account] = max(newest_from.get(account, 0), millis(valid_from))
    assert {
        r["key"]: ({c: r[c] for c in ("mean", "std", "n")}, millis(r["valid_from"])) for r in rows
    } == {a: (newest[a], newest_from[a]) for a in newest}
