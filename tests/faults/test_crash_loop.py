"""Workers SIGKILLed at random moments while they process, under both guarantees.

Exactly-once: the outputs (read_committed) hold exactly one result per input and the
committed counts equal a plain-Python recount. At-least-once: nothing is lost; the
duplicates are counted and reported. After every kill, the restarted worker restores only
the changelog tail written since its last commit (plus at most one restore batch).
"""

from __future__ import annotations

import random
import time
from collections import Counter

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import fold, records_since
from tests.support.transaction_log import read_committed_partition, read_committed_topic
from tests.support.waiting import wait_until
from worker.config import load
from worker.dev.processes import WorkerProcess
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.processing import timestamps
from worker.serde import JSON, STR
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

PARTITIONS = 4
KEYS = [f"k{i:03d}" for i in range(40)]
KILLS = 10
BATCH = 2000
COMMIT_MS = 300
SEED = 20261121
APP = "worker.examples.counting:build"


class Inputs:
    def __init__(self, bootstrap: str) -> None:
        self.settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
        self.sent: list[tuple[str, dict[str, int]]] = []
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [
            NewTopic(counting.INPUTS, PARTITIONS, 1),
            NewTopic(counting.OUTPUTS, PARTITIONS, 1),
        ]
        for future in admin.create_topics(topics).values():
            future.result(30)

    def produce(self, count: int, rng: random.Random) -> None:
        start = len(self.sent)
        chunk = [(rng.choice(KEYS), {"id": start + i}) for i in range(count)]
        produce_records(self.settings, counting.INPUTS, chunk, STR, JSON)
        self.sent.extend(chunk)

    def expected_counts(self) -> dict[str, int]:
        return dict(Counter(key for key, _ in self.sent))


# Outputs and changelogs are read as a read_committed consumer on Kafka sees them, from
# the transaction markers in the log: the test broker shows aborted records to
# read_committed consumers (tests/support/transaction_log.py).
def _outputs(inputs: Inputs) -> list[dict[str, int]]:
    records = read_committed_topic(inputs.settings.bootstrap_servers, counting.OUTPUTS, PARTITIONS)
    return [orjson.loads(r.value) for _, r in records if r.value]


def _committed_counts(bootstrap: str, application_id: str) -> dict[str, int]:
    topic = f"{application_id}-{counting.COUNTS}-changelog"
    table: dict[bytes, bytes] = {}
    for p in range(PARTITIONS):
        records = read_committed_partition(bootstrap, topic, p)
        table.update(fold([(r.offset, r.key, r.value) for r in records]))
    return {k.decode(): orjson.loads(v) for k, v in table.items()}


def _crash_loop(own_broker, worker_factory, guarantee: str) -> tuple[Inputs, list[WorkerProcess]]:
    rng = random.Random(SEED)
    inputs = Inputs(own_broker.bootstrap)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "processing.guarantee": guarantee,
        "commit.interval.ms": COMMIT_MS,
        "restore.batch.records": BATCH,
        "num.standby.replicas": 1,
        # records_since() counts changelog records by timestamp: stamp writes when made.
        "timestamp.extractor": timestamps.WALL_CLOCK,
    }
    workers = [worker_factory(name, settings=settings, args=["--app", APP]) for name in ("a", "b")]
    for w in workers:
        w.wait_ready(90)
    changelog = f"{worker_factory.application_id}-{counting.COUNTS}-changelog"
    for kill in range(KILLS):
        inputs.produce(1500, rng)
        victim = rng.choice(workers)
        wait_until(
            lambda v=victim: v.metric("worker_processed_records_total") > 0,
            60,
            message=f"kill {kill}: {victim.name} processing",
        )
        time.sleep(rng.uniform(0.05, 0.6))  # a random moment mid-processing (the point of the test)
        killed_at_ms = int(time.time() * 1000)
        assert victim.kill() == -9, f"kill {kill} (seed {SEED})"
        victim.start()
        victim.wait_ready(120)
        since = killed_at_ms - COMMIT_MS - 2000  # its last commit was at most this long before
        for _, labels, restored in victim.metric_samples("worker_restored_records_total"):
            task, store = labels["task"], labels["store"]
            partition = int(task.split("_")[1])
            tail = records_since(own_broker.bootstrap, changelog, partition, since)
            assert restored <= tail + BATCH, (
                f"kill {kill} (seed {SEED}): {victim.name} restored {restored} records of "
                f"{store} for {task}; only {tail} were written since its last commit"
            )
    inputs.produce(500, rng)
    return inputs, workers


@pytest.mark.duration(62)
def test_exactly_once_survives_ten_random_kills_with_exactly_one_result_per_input(
    own_broker, worker_factory
):
    inputs, workers = _crash_loop(own_broker, worker_factory, "exactly_once_v2")
    expected = inputs.expected_counts()
    wait_until(
        lambda: _committed_counts(own_broker.bootstrap, worker_factory.application_id) == expected,
        120,
        message=f"committed counts equal the recount (seed {SEED})",
    )
    outputs = _outputs(inputs)
    ids = Counter(o["id"] for o in outputs)
    assert len(outputs) == len(inputs.sent), f"one result per input (seed {SEED})"
    assert set(ids) == set(range(len(inputs.sent))) and max(ids.values()) == 1
    by_id = {o["id"]: o["count"] for o in outputs}
    per_key: dict[str, list[int]] = {}
    for key, value in inputs.sent:
        per_key.setdefault(key, []).append(by_id[value["id"]])
    for key, counts in per_key.items():  # one key, one partition: processed in input order
        assert counts == list(range(1, len(counts) + 1)), f"{key}: counts 1..n (seed {SEED})"
    for w in workers:
        assert w.terminate() == 0
    assert _stores_after_clean_stop(workers, worker_factory.application_id) == expected


def _stores_after_clean_stop(workers: list[WorkerProcess], application_id: str) -> dict[str, int]:
    """The counts every task's freshest store copy holds (highest stored offset wins: the
    last active's; a standby copy may lag). Read straight from the RocksDB files."""
    env = RocksDBEnv(32 * 1024 * 1024)
    changelog = f"{application_id}-{counting.COUNTS}-changelog"
    merged: dict[str, int] = {}
    for p in range(PARTITIONS):
        best: tuple[int, dict[bytes, bytes]] | None = None
        for w in workers:
            path = w.state_dir / application_id / f"0_{p}" / "rocksdb" / counting.COUNTS
            if not path.exists():
                continue
            store = Store.open(path, env, counting.COUNTS)
            try:
                offset = store.committed_offsets().get((changelog, p), -1)
                if best is None or offset > best[0]:
                    best = (offset, dict(store.iter_committed()))
            finally:
                store.close()
        assert best is not None, f"no copy of task 0_{p} on any worker"
        merged.update({k.decode(): orjson.loads(v) for k, v in best[1].items()})
    return merged


@pytest.mark.duration(62)
def test_at_least_once_survives_the_same_kills_losing_nothing(
    own_broker, worker_factory, record_property
):
    inputs, workers = _crash_loop(own_broker, worker_factory, "at_least_once")
    expected = inputs.expected_counts()
    wait_until(
        lambda: (
            all(
                c >= expected[k]
                for k, c in _committed_counts(
                    own_broker.bootstrap, worker_factory.application_id
                ).items()
            )
            and len({o["id"] for o in _outputs(inputs)}) == len(inputs.sent)
        ),
        120,
        message=f"every input processed at least once (seed {SEED})",
    )
    outputs = _outputs(inputs)
    duplicates = len(outputs) - len(inputs.sent)
    record_property("duplicates", duplicates)
    print(
        f"at-least-once: {len(inputs.sent)} inputs, {duplicates} duplicate results after {KILLS} kills"
    )
    assert duplicates >= 0
    for w in workers:
        assert w.terminate() == 0
