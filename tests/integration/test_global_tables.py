"""A global table on the real broker: every worker holds all of its partitions, read to
the end before any payment is joined, kept current while it runs, queryable by key on
the instance asked, and resumed from its stored offsets after a restart (only the tail
is read again).

The merchants topic has 3 partitions and the payments 2: a stream-global join needs no
co-partitioning, and each payment finds its merchant whichever partition holds it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.integration.global_app import TOPICS_ENV
from tests.support.kafka_io import produce_raw, read_partition
from tests.support.waiting import wait_until
from worker.config import load
from worker.kafka.admin import Admin
from worker.kafka.topics import TopicSpec

pytestmark = pytest.mark.integration

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
MERCHANTS = 10


def enriched(bootstrap: str, topic: str) -> list[tuple[str, list[object]]]:
    out = []
    for partition in range(2):
        for _offset, key, value in read_partition(bootstrap, topic, partition):
            assert key is not None and value is not None
            out.append((key.decode(), json.loads(value)))
    return out


def payments(first: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    return [
        (f"acct-{i}".encode(), json.dumps({"merchant": f"m{i % MERCHANTS}", "n": i}).encode())
        for i in range(first, first + count)
    ]


def bootstrapped(worker) -> list[int]:
    return [
        e["records"] for e in worker.log_events() if e.get("event") == "global_tables.bootstrapped"
    ]


@pytest.mark.duration(40)
def test_a_global_table_is_read_whole_before_joining_and_kept_current(bootstrap, worker_factory):
    suffix = uuid.uuid4().hex[:8]
    merchants, pays, out = f"merchants-{suffix}", f"payments-{suffix}", f"enriched-{suffix}"
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    Admin(settings).create_topics([TopicSpec(merchants, 3), TopicSpec(pays, 2), TopicSpec(out, 2)])
    produce_raw(
        bootstrap,
        merchants,
        [(f"m{i}".encode(), f"name-{i}".encode()) for i in range(MERCHANTS)],
    )
    produce_raw(bootstrap, pays, payments(0, 20))  # waiting before the worker starts
    env = {TOPICS_ENV: f"{merchants},{pays},{out}", "PYTHONPATH": REPO}
    args = ["--app", "tests.integration.global_app:build"]
    worker = worker_factory("global", args=args, env=env)
    worker.wait_ready(60)
    wait_until(lambda: len(enriched(bootstrap, out)) == 20, 30, message="20 enriched")
    for key, (payment, name) in enriched(bootstrap, out):
        assert name == f"name-{int(key.split('-')[1]) % MERCHANTS}", (key, payment, name)
    assert bootstrapped(worker) == [MERCHANTS]
    status, body = worker.get("/stores/merchants/keys/m7")  # any key, on any instance
    assert status == 200, body
    assert json.loads(body)["value"] == "name-7"

    produce_raw(bootstrap, merchants, [(b"m3", b"renamed"), (b"m4", None)])
    wait_until(
        lambda: worker.metric("worker_processed_records_total") >= 20, 10, message="processed"
    )
    # The update reaches the table between two batches; a payment produced after it was
    # applied sees it. Rounds of payments until the newest of m3 and of m4 do.
    newest: dict[str, tuple[int, object]] = {}
    rounds = iter(range(1000, 100_000, 10))

    def latest_names() -> bool:
        produce_raw(bootstrap, pays, payments(next(rounds), 10))
        for _key, (payment, name) in enriched(bootstrap, out):
            merchant, n = payment["merchant"], payment["n"]  # type: ignore[index]
            if n > newest.get(merchant, (-1, None))[0]:
                newest[merchant] = (n, name)
        return newest.get("m3", (0, None))[1] == "renamed" and newest.get("m4", (0, ""))[1] is None

    wait_until(latest_names, 30, message="the renamed and deleted merchants joined")
    worker.terminate(30)

    again = worker_factory("global-again", args=args, env=env, state_dir=worker.state_dir)
    again.wait_ready(60)
    assert bootstrapped(again) == [0]  # resumed from the stored offsets: nothing to reread
    again.terminate(30)
