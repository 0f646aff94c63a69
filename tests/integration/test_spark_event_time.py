"""A Spark load stamped from a timestamp column backfills a versioned table's history.

``worker spark load table --timestamp-column`` (real Spark, local mode, in its own
process group) writes two versions of one account and one of another, each stamped with
its row's time, into the table of ``tests.integration.versioned_app``. A worker started
on it then joins stream records as of their own time: a record stamped before an
account's first version finds none, one between the versions the older, one after the
last the newest; all of it half an hour in the past, which a load stamping the time it
writes could never give.
"""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks.kafka_io import create_topics, produce
from tests.integration.versioned_app import TOPICS_ENV
from tests.support.kafka_io import read_partition
from tests.support.waiting import wait_until

pytest.importorskip("pyspark", reason="the spark extra is not installed (make install has it)")

from tests.support.process_groups import run_group  # noqa: E402

# Spark's local JVM beside the suite's Kafka JVMs: the timeout only catches a hang.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
PARTITIONS = 2


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")


def joined(bootstrap: str, topic: str) -> dict[str, str]:
    """The join's outputs by stream value: ``value|version`` -> version."""
    out = [v for p in range(PARTITIONS) for _, _, v in read_partition(bootstrap, topic, p)]
    return dict(value.decode().split("|", 1) for value in out if value is not None)


@pytest.mark.brokers("kafka")  # a transaction per partition
@pytest.mark.duration(60)
def test_a_history_loaded_with_its_times_serves_each_stream_record_the_version_of_its_time(
    own_broker, worker_factory, tmp_path
):
    bootstrap = own_broker.bootstrap
    suffix = uuid.uuid4().hex[:8]
    table, stream, out = f"et-{suffix}", f"es-{suffix}", f"eo-{suffix}"
    create_topics(bootstrap, {table: PARTITIONS, stream: PARTITIONS, out: PARTITIONS})
    base = (int(time.time()) - 1800) * 1000  # half an hour ago, inside one HISTORY_MS
    rows = [  # newest first: the load writes each key's versions oldest first all the same
        ("acct-1", "a1-new", iso(base + 20_000)),
        ("acct-2", "a2-only", iso(base + 10_000)),
        ("acct-1", "a1-old", iso(base)),
    ]
    history = tmp_path / "profiles.csv"
    history.write_text("account,profile,valid_from\n" + "".join(f"{','.join(r)}\n" for r in rows))

    done = run_group(
        [
            sys.executable, "-m", "worker", "spark", "load", "table",
            "--input", str(history), "--topic", table, "--key-column", "account",
            "--value-column", "profile", "--value-serde", "str",
            "--schema", "account STRING, profile STRING, valid_from TIMESTAMP",
            "--timestamp-column", "valid_from", "--mode", "upsert",
            "--set", f"bootstrap.servers={bootstrap}",
        ],
        timeout=300,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"loaded 3 rows into {table} (3 upserts, 0 deletes")
    last = {
        key: value
        for p in range(PARTITIONS)
        for _, key, value in read_partition(bootstrap, table, p)
    }
    assert last == {b"acct-1": b"a1-new", b"acct-2": b"a2-only"}  # oldest first per key

    worker = worker_factory(
        "event-time",
        settings={"bootstrap.servers": bootstrap, "commit.interval.ms": 200},
        args=["--app", "tests.integration.versioned_app:build"],
        env={TOPICS_ENV: f"{table},{stream},{out}", "PYTHONPATH": REPO},
    )
    worker.wait_ready(120)
    wait_until(  # the versions first: a task takes its partitions' records in fetch order
        lambda: worker.metric("worker_processed_records_total") >= len(rows),
        60,
        message="the loaded versions applied",
    )
    payments = {  # stream value -> (key, time, the version valid then)
        "before-any": ("acct-1", base - 10_000, "None"),
        "between": ("acct-1", base + 5_000, "a1-old"),
        "after-both": ("acct-1", base + 25_000, "a1-new"),
        "before-its-only": ("acct-2", base + 5_000, "None"),
        "after-its-only": ("acct-2", base + 15_000, "a2-only"),
    }
    produce(
        bootstrap,
        stream,
        [(key.encode(), name.encode()) for name, (key, _, _) in payments.items()],
        timestamps=[at for _, at, _ in payments.values()],
    )

    wait_until(
        lambda: len(joined(bootstrap, out)) == len(payments), 60, message="every record joined"
    )
    assert joined(bootstrap, out) == {name: version for name, (_, _, version) in payments.items()}
