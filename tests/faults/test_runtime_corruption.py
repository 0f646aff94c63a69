"""Bytes flipped in an SST data block of a running worker's task: the task heals itself.

RocksDB opens a store whose data block is corrupt without complaint and finds the damage
only when it reads the block. Two workers share the tasks, each task with a standby on
the other. This test lets worker ``a`` flush one of its active tasks' store to an SST
file, overwrites the middle of that file's data section while it runs, and then reads
the keys it holds by interactive queries (which read RocksDB directly, past the worker's
read cache). Worker ``a`` must answer 503 (never 500) for that task meanwhile, wipe it
(``worker_state_wipes_total{reason="corrupt_read"}``), give it up to the group (whose
assignor places its active on ``b``, whose standby is caught up while ``a``'s copy is
not), keep processing its other task without a pause, and nothing may be lost: every
input has its output and the changelog's count of every key is at least a plain recount
(at least once: a record whose commit was interrupted may be counted twice).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import fold, read_partition
from tests.support.waiting import wait_until
from worker.config import load
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.partitioner import partition_for
from worker.serde import JSON, STR

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

PARTITIONS = 4
KEYS = [f"key-{i:06d}" for i in range(16_000)]
APP = "worker.examples.counting:build"


def partition_of(key: str) -> int:
    return partition_for(key.encode(), PARTITIONS)


class Inputs:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
        self.sent: list[str] = []
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
        for future in admin.create_topics(topics).values():
            future.result(30)

    def produce(self, keys: list[str]) -> None:
        start = len(self.sent)
        records = [(key, {"id": start + i}) for i, key in enumerate(keys)]
        produce_records(self.settings, counting.INPUTS, records, STR, JSON)
        self.sent.extend(keys)

    def output_ids(self) -> set[int]:
        ids: set[int] = set()
        for p in range(PARTITIONS):
            for _, _, value in read_partition(self.bootstrap, counting.OUTPUTS, p):
                if value:
                    ids.add(orjson.loads(value)["id"])
        return ids

    def changelog_counts(self, application_id: str) -> dict[str, int]:
        topic = f"{application_id}-{counting.COUNTS}-changelog"
        table: dict[bytes, bytes] = {}
        for p in range(PARTITIONS):
            table.update(fold(read_partition(self.bootstrap, topic, p)))
        return {k.decode(): orjson.loads(v) for k, v in table.items()}


def largest_sst(store_dir: Path) -> Path | None:
    files = sorted(store_dir.glob("*.sst"), key=lambda p: p.stat().st_size)
    return files[-1] if files else None


def damage(sst: Path) -> None:
    """Overwrite the middle of the data section: from 10 % to 60 % of the file. Data
    blocks come first in an SST; its index, filter and footer, at the end, stay intact."""
    size = sst.stat().st_size
    start, end = size // 10, size * 6 // 10
    with sst.open("r+b") as fh:
        fh.seek(start)
        fh.write(b"\xab" * (end - start))


def active_answers(key: str, *workers) -> list[object]:  # type: ignore[no-untyped-def]
    """The values the workers answer for ``key`` from an active (a 200); a standby's 503
    and a redirect are left out."""
    answers = [w.get(f"/stores/counts/keys/{key}") for w in workers]
    return [orjson.loads(body)["value"] for status, body in answers if status == 200]


def actives(worker) -> set[str]:  # type: ignore[no-untyped-def]
    status, body = worker.get("/tasks")
    assert status == 200, body
    return {t["task_id"] for t in orjson.loads(body)["tasks"] if t["kind"] == "active"}


@pytest.mark.duration(30)
def test_a_corrupt_sst_block_found_at_run_time_heals_its_task_and_loses_nothing(
    own_broker, worker_factory
):
    inputs = Inputs(own_broker.bootstrap)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "processing.guarantee": "at_least_once",
        "commit.interval.ms": 300,
        # Every commit flushes the stores' memtables (the checkpoint) once this has passed.
        "statestore.checkpoint.interval.ms": 500,
        "rocksdb.memory.bytes": 16 * 1024 * 1024,  # the least: small block and read caches
        "num.standby.replicas": 1,
        # Below the target's changelog length: its wiped copy is not caught up, the
        # standby is (the default, 10000, would count both as caught up).
        "acceptable.recovery.lag": 100,
    }
    a, b = (worker_factory(n, settings=settings, args=["--app", APP]) for n in ("a", "b"))
    wait_until(
        lambda: a.ready() and b.ready() and len(actives(a)) == len(actives(b)) == 2,
        90,
        message="two workers sharing the tasks",
    )
    inputs.produce(KEYS)
    wait_until(
        lambda: (
            a.metric("worker_processed_records_total") + b.metric("worker_processed_records_total")
            >= len(KEYS)
        ),
        90,
        message="the first records processed",
    )

    # A trickle of records makes commits, whose checkpoints flush the store to an SST.
    a_actives = actives(a)
    target = min(a_actives)
    store_dir = a.state_dir / worker_factory.application_id / target / "rocksdb" / "counts"
    partition = int(target.split("_")[1])
    target_keys = [k for k in KEYS if partition_of(k) == partition]

    # The first keys may reach the store over several commits (on Kafka they do), each
    # checkpoint flushing a small SST: enough data on disk, and a largest SST of a few
    # data blocks to damage, is what the rest needs.
    def flushed() -> bool:
        inputs.produce([f"tick-{len(inputs.sent)}"])
        sst = largest_sst(store_dir)
        total = sum(p.stat().st_size for p in store_dir.glob("*.sst"))
        return sst is not None and sst.stat().st_size > 8_000 and total > 20_000

    wait_until(flushed, 60, message=f"an SST of the target store: {list(store_dir.glob('*'))}")
    sst = largest_sst(store_dir)
    assert sst is not None
    damage(sst)

    statuses: Counter[int] = Counter()
    # A range query reads through an iterator, a key query does not: both answer 503
    # while the task heals, never 500.
    status, body = a.get("/stores/counts/range?limit=100000")
    statuses[status] += 1
    assert status != 500, f"range: {body!r}"
    for key in target_keys[:: max(1, len(target_keys) // 200)]:
        status, body = a.get(f"/stores/counts/keys/{key}")
        statuses[status] += 1
        assert status != 500, f"{key}: {body!r}"
    wait_until(
        lambda: a.metric("worker_state_wipes_total", reason="corrupt_read") >= 1,
        60,
        message=f"the corrupted task wiped (queries answered {dict(statuses)})",
    )
    assert statuses[503] > 0, f"a query met the corrupt block: {dict(statuses)}"
    assert a.metric("worker_state_wipes_total", reason="corrupt_read") == 1, "healed once"
    # The healed active became a standby on ``a``; b's standby is caught up and a's copy
    # is not, so by the assignor's usual rules the next assignment does not make it
    # active on ``a`` (b takes it over while ``a`` warms up, then it may come back).
    wait_until(
        lambda: any(
            e.get("event") == "assignment.applied" and target not in e["active"]
            for e in a.log_events()
        ),
        60,
        message=f"an assignment placing {target}'s active elsewhere",
    )

    inputs.produce(KEYS)  # every key once more: counted on top of the restored counts
    expected_ids = set(range(len(inputs.sent)))
    wait_until(
        lambda: inputs.output_ids() >= expected_ids,
        120,
        message="an output for every input",
    )
    expected = Counter(inputs.sent)
    # At least once: a commit the heal or a rebalance interrupted after its changelog
    # records were acknowledged and before its source offsets were (a rebalance began, the
    # offset commit failed) reprocesses those records, so a key may be counted twice. What
    # this guarantee never allows, and what a wipe that lost restored state would show, is
    # a key counted less than the recount or not at all.
    counts: dict[str, int] = {}

    def none_lost() -> bool:
        counts.update(inputs.changelog_counts(worker_factory.application_id))
        return all(counts.get(key, 0) >= n for key, n in expected.items())

    wait_until(
        none_lost,
        60,
        message=lambda: (
            "the changelog's counts at least the recount: "
            f"{ {k: (counts.get(k), n) for k, n in expected.items() if counts.get(k, 0) < n} }"
        ),
    )
    assert set(counts) == set(expected), "a count for every key sent and no other"
    repeated = {k: counts[k] - n for k, n in expected.items() if counts[k] != n}
    assert len(repeated) <= len(expected) // 100, f"counted twice: {repeated}"
    for worker in (a, b):
        worker.wait_ready(60)
        assert worker.alive and len(worker.pids) == 1, f"{worker.name} never stopped"
    events = a.log_events()
    found = next(i for i, e in enumerate(events) if e.get("event") == "task.corrupted")
    corrupted = {e["task_id"] for e in events if e.get("event") == "task.corrupted"}
    assert corrupted == {target}, "only the damaged task was touched"
    kept = a_actives - {target}
    moved = [
        e for e in events[found:] if e.get("event") == "task.transition" and e["task_id"] in kept
    ]
    assert moved == [], "the other tasks kept running through the heal and its rebalance"
    # Whichever worker holds the target's active now answers (b took it over; a warmup
    # on ``a`` may have caught up and been given it back since).
    for key in target_keys[:50]:
        wait_until(
            lambda key=key: 2 in active_answers(key, a, b),
            30,
            message=f"{key} answered by its active: {active_answers(key, a, b)}",
        )
    assert a.terminate() == 0 and b.terminate() == 0
