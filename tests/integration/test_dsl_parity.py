"""The test driver and a worker on the broker agree: each DSL topology of
``tests.apps.dsl_cases`` runs over the same input both ways, on 3 partitions (repartition
hops included: the worker creates their topics at start), and the outputs match: per
key, the last value of an aggregation (the interleaving of partitions that feed one group
may differ), and as a multiset for stateless outputs. Exactly-once on the worker, outputs
read as read_committed, so nothing may be repeated.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps import dsl_cases
from tests.support.transaction_log import read_committed_partition
from tests.support.waiting import wait_until
from worker.events import REPARTITION_PURGE_UNSUPPORTED, REPARTITION_PURGED
from worker.serde import JSON, STR, Codec
from worker.testing import TopologyTestDriver

# On both brokers: on Kafka the repartition purge really deletes records (the embedded
# broker lacks DeleteRecords, and purging turns itself off there).
pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu", "kafka")]

PARTITIONS = 3
REPO = str(Path(__file__).resolve().parents[2])


def driver_outputs(case: dsl_cases.Case, name: str, base: int) -> dict[str, list[Any]]:
    with TopologyTestDriver(dsl_cases.builder(name, ""), partitions=PARTITIONS) as driver:
        topic = driver.input_topic(case.input)
        for key, value, ts in case.records(base):
            topic.pipe(key, value, timestamp=ts)
        found: dict[str, list[Any]] = {}
        for out in case.outputs:
            keys = dsl_cases.WINDOWED_KEYS if name == "windowed" else STR
            found[out] = driver.output_topic(out, keys, JSON).read_key_values()
        return found


def broker_outputs(
    worker_factory: Any, case: dsl_cases.Case, name: str, base: int, expected: dict[str, int]
) -> dict[str, list[Any]]:
    bootstrap = worker_factory.bootstrap
    prefix = f"dsl-{uuid.uuid4().hex[:8]}-"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(prefix + t, PARTITIONS, 1) for t in (case.input, *case.outputs)]
    for future in admin.create_topics(topics).values():
        future.result(30)
    env = {"PYTHONPATH": REPO, dsl_cases.CASE_ENV: name, dsl_cases.PREFIX_ENV: prefix}
    settings = {
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": 200,
        # purging runs during the test: on a broker without DeleteRecords it turns itself off
        "repartition.purge.interval.ms": 100,
    }
    worker = worker_factory("w", settings=settings, env=env, args=["--app", APP])
    keys, values = Codec(STR), Codec(JSON)
    # murmur2 of the key bytes, as the worker's sinks (and the driver) partition
    producer = ck.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value, ts in case.records(base):
        producer.produce(prefix + case.input, values.encode(value), keys.encode(key), timestamp=ts)
    assert producer.flush(30) == 0
    out_keys = Codec(dsl_cases.WINDOWED_KEYS if name == "windowed" else STR)

    def read() -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for out in case.outputs:
            # each key's outputs are in one partition, in the order they were processed
            records = [
                r
                for p in range(PARTITIONS)
                for r in read_committed_partition(bootstrap, prefix + out, p)
            ]
            found[out] = [(out_keys.decode(r.key), values.decode(r.value)) for r in records]
        return found

    wait_until(
        lambda: all(len(v) >= expected[k] for k, v in read().items()),
        timeout=90,
        message=lambda: (
            f"outputs {[(k, len(v)) for k, v in read().items()]} of {expected}"
            f"\n{worker.log_tail(30)}"
        ),
    )
    if name == "per_merchant":
        wait_until(
            lambda: purged_or_unsupported(worker),
            timeout=60,
            message=lambda: f"no purge of the repartition topic\n{worker.log_tail(30)}",
        )
    assert worker.terminate() == 0
    return read()


def purged_or_unsupported(worker: Any) -> bool:
    """The worker purged the repartition topic (DeleteRecords succeeded), or found that
    the broker does not delete records (the embedded broker) and said so."""
    events = {e.get("event") for e in worker.log_events()}
    return bool(events & {REPARTITION_PURGED, REPARTITION_PURGE_UNSUPPORTED})


APP = "tests.apps.dsl_cases:build"


@pytest.mark.parametrize("name", sorted(dsl_cases.CASES))
def test_a_dsl_topology_gives_the_same_results_in_the_driver_and_on_the_broker(
    worker_factory: Any, name: str
) -> None:
    case = dsl_cases.CASES[name]
    base = int(time.time() * 1000) // 10_000 * 10_000 - 600_000
    expected = driver_outputs(case, name, base)
    got = broker_outputs(worker_factory, case, name, base, {k: len(v) for k, v in expected.items()})
    for out in case.outputs:
        if case.aggregated:
            assert dict(got[out]) == dict(expected[out]), out
            assert len(got[out]) == len(expected[out]), out
        else:
            assert Counter(map(repr, got[out])) == Counter(map(repr, expected[out])), out
