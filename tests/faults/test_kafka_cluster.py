"""A Kafka broker killed and restarted under exactly-once (issue 29 item 6).

A 3-node KRaft cluster (every node broker and controller; replication factor 3,
``min.insync.replicas`` 2, internal topics too), two workers under ``exactly_once_v2``
with continuous input. One node is SIGKILLed by its PID while they process, and started
again 15 s later over its data. Nothing is lost and no duplicate is visible to a plain
``read_committed`` reader, every store equals the recount, the workers keep running,
and each partition's longest silence of visible output (its stall) is reported.

Three JVMs on the suite's 2-core machine: it runs on its own (``make test-cluster``,
called from ``.ci/run``), not in ``make test``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.committed_reader import CommittedTail, Seen
from tests.support.eos_scenario import (
    APP,
    Inputs,
    active_partitions,
    assert_exactly_once,
    eos_settings,
)
from tests.support.ports import PortRegistry
from tests.support.traffic import SteadyProducer
from tests.support.waiting import wait_until
from worker.dev.kafka_broker import KafkaBroker
from worker.examples import counting

pytestmark = [pytest.mark.faults, pytest.mark.cluster]

PARTITIONS = 4
SEED = 20261129
DOWN_S = 15.0


def _longest_silences(seen: list[Seen], since: float, until: float) -> dict[int, float]:
    """Per partition, the longest time between two visible outputs within [since, until]."""
    longest: dict[int, float] = {}
    for p in range(PARTITIONS):
        times = (
            [since]
            + sorted(s.seen_at for s in seen if s.partition == p and since <= s.seen_at <= until)
            + [until]
        )
        longest[p] = round(max(b - a for a, b in zip(times, times[1:], strict=False)), 2)
    return longest


@pytest.mark.duration(130)
def test_a_broker_killed_and_restarted_under_exactly_once_loses_and_repeats_nothing(
    worker_factory, ports: PortRegistry, tmp_path: Path, record_property
):
    cluster = KafkaBroker(
        port=ports.take(), take_port=ports.take, data_dir=tmp_path / "k3", nodes=3, heap_mb=384
    )
    with cluster:
        bootstrap = cluster.bootstrap
        inputs = Inputs(bootstrap, PARTITIONS, 200, SEED, replicas=3)
        settings = eos_settings(bootstrap, **{"replication.factor": 3})
        workers = [worker_factory(n, settings=settings, args=["--app", APP]) for n in "ab"]
        for w in workers:
            w.wait_ready(120)
        victim = cluster.nodes[1]
        with (
            SteadyProducer(inputs, per_tick=20, tick=0.1),
            CommittedTail(bootstrap, counting.OUTPUTS, PARTITIONS) as tail,
        ):
            wait_until(lambda: all(active_partitions(w) for w in workers), 60)
            steady = time.time()
            wait_until(
                lambda: all(tail.first_after(p, steady) for p in range(PARTITIONS)),
                60,
                message="every partition's output flows",
            )
            wait_until(lambda: time.time() >= steady + 5, 10)  # a baseline before the fault
            killed_at = time.time()
            victim.kill()  # SIGKILL by its PID
            wait_until(lambda: time.time() >= killed_at + DOWN_S, DOWN_S + 5)
            restarted_at = time.time()
            victim.start(cluster.node_log(victim), cluster.heap_mb, die_with_parent=True)
            cluster.wait_ready(90)
            back_at = time.time()
            wait_until(lambda: time.time() >= back_at + 10, 15)  # traffic after its return
            ended = time.time()
        before = _longest_silences(tail.seen, steady, killed_at)
        during = _longest_silences(tail.seen, killed_at, restarted_at)
        after = _longest_silences(tail.seen, restarted_at, ended)
        assert all(w.alive for w in workers), [w.log_tail() for w in workers if not w.alive]
        failed = {
            w.name: {
                labels["result"]: value
                for _, labels, value in w.metric_samples("worker_commits_total")
                if labels.get("result") != "committed" and value
            }
            for w in workers
        }
        print(
            f"broker node {victim.node_id} killed for {DOWN_S:.0f} s (ready again "
            f"{back_at - restarted_at:.1f} s after its restart): longest silence per partition "
            f"before {before}, while down {during}, after its restart {after}; "
            f"failed commits {failed}; {len(inputs.sent)} inputs"
        )
        record_property("stall_while_down_s", max(during.values()))
        record_property("stall_after_restart_s", max(after.values()))
        assert_exactly_once(inputs, workers, worker_factory.application_id, SEED)
        for w in workers:
            assert w.terminate() == 0
