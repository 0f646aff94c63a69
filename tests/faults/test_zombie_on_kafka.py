"""A zombie under exactly-once (issue 29 item 4): a worker frozen (SIGSTOP) past its session
while its tasks move, then resumed (SIGCONT).

Kafka refuses what it then tries to commit: the broker aborted its open transaction
at ``transaction.timeout.ms`` and bumped its producer's epoch (fenced), and its offsets
name a generation the group has left (TxnOffsetCommit's generation check, which the test
broker does not make). It must close its tasks dirty and rejoin, not crash or loop; a
``read_committed`` reader sees nothing it wrote after the freeze, and the state stays
exact. Runs on Kafka only (see test_exactly_once_on_kafka.py).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.committed_reader import CommittedTail
from tests.support.eos_scenario import (
    Inputs,
    active_partitions,
    assert_exactly_once,
    eos_settings,
    logged_at,
    logged_since,
    start_workers,
)
from tests.support.traffic import SteadyProducer
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess
from worker.examples import counting

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

PARTITIONS = 6
SEED = 20261128


def _refused(worker: WorkerProcess) -> float:
    return sum(
        value
        for _, labels, value in worker.metric_samples("worker_commits_total")
        if labels.get("result") in ("generation_moved", "fenced")
    )


@pytest.mark.parametrize("thaw", ["tasks_moved", "transaction_timed_out"])
@pytest.mark.duration(50)
def test_a_frozen_worker_resumed_after_its_tasks_moved_is_fenced_and_rejoins(
    own_broker, worker_factory, record_property, thaw
):
    """Resumed as soon as its tasks run elsewhere (its open transaction still open: the
    generation check refuses its offsets), or once the broker has aborted that
    transaction at its timeout (and bumped its producer's epoch)."""
    inputs = Inputs(own_broker.bootstrap, PARTITIONS, 300, SEED)
    settings = eos_settings(own_broker.bootstrap)
    workers = start_workers(worker_factory, settings)
    victim = workers[1]
    others = [w for w in workers if w is not victim]
    with (
        SteadyProducer(inputs, per_tick=6, tick=0.02),
        CommittedTail(own_broker.bootstrap, counting.OUTPUTS, PARTITIONS) as tail,
    ):
        wait_until(lambda: active_partitions(victim), 60, message="the victim runs tasks")
        moved = active_partitions(victim)
        refused_before = _refused(victim)
        # Frozen half a commit interval after a commit it made: inside its next transaction.
        now = time.time()
        wait_until(lambda: all(tail.first_after(p, now) for p in moved), 30)
        seen = time.monotonic()
        wait_until(lambda: time.monotonic() >= seen + 0.15, 5)
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGSTOP)
        frozen_at = time.time()
        # The group moves the tasks after the session timeout; their new owner runs them
        # at once but, on Kafka, its output stays hidden behind the zombie's open
        # transaction (the last stable offset) until that transaction ends.
        wait_until(
            lambda: all(
                logged_since(
                    others,
                    "task.transition",
                    frozen_at,
                    task_id=f"0_{p}",
                    role="active",
                    dst="running",
                )
                for p in moved
            ),
            90,
            message="the frozen worker's tasks run elsewhere",
        )
        running_at = time.time()
        running_after = running_at - frozen_at
        if thaw == "transaction_timed_out":  # the broker aborts it (the derived timeout)
            timeout_s = (int(settings["commit.interval.ms"]) + 10000) / 1000
            wait_until(lambda: time.time() >= frozen_at + timeout_s + 2, timeout_s + 5)
        resumed_at = time.time()
        os.kill(victim.pid, signal.SIGCONT)
        wait_until(
            lambda: all(tail.first_after(p, running_at) for p in moved),
            90,
            message="the frozen worker's tasks' output flows again",
        )
        visible_after = max(tail.first_after(p, running_at) or 0 for p in moved) - frozen_at
        wait_until(
            lambda: _refused(victim) > refused_before or _lost(victim),
            60,
            message="the zombie learns it was fenced",
        )
        wait_until(
            lambda: logged_since([victim], "membership.assigned", resumed_at),
            120,
            message="the zombie rejoins",
        )
        rejoined_after = logged_since([victim], "membership.assigned", resumed_at) - resumed_at
        victim.wait_ready(120)
        assert victim.alive, victim.log_tail()
    events = _zombie_events(victim, resumed_at)
    record_property("visible_after_s", round(visible_after, 2))
    record_property("rejoined_after_s", round(rejoined_after, 2))
    print(
        f"zombie ({thaw}): tasks {moved} running elsewhere {running_after:.2f} s after the "
        f"freeze, resumed at {resumed_at - frozen_at:.2f} s, output visible again at "
        f"{visible_after:.2f} s; "
        f"after SIGCONT: {events}; a new assignment {rejoined_after:.2f} s after SIGCONT"
    )
    assert_exactly_once(inputs, others, worker_factory.application_id, SEED)
    assert victim.alive and victim.terminate() == 0


def _lost(worker: WorkerProcess) -> bool:
    return any(
        e.get("event") in ("membership.lost", "commit.migrated", "revoke.migrated")
        for e in worker.log_events()
    )


def _zombie_events(worker: WorkerProcess, since: float) -> dict[str, int]:
    """How the zombie reacted after ``since``: counts of the warnings and membership
    events it logged (commit failures by reason)."""
    wanted = {
        "commit.failed",
        "membership.lost",
        "commit.migrated",
        "tasks.revived",
        "transaction.transition",
        "membership.assigned",
        "revoke.migrated",
    }
    counts: dict[str, int] = {}
    for e in worker.log_events():
        name = e.get("event", "")
        if name in wanted and logged_at(e) > since:
            key = f"{name}:{e.get('reason', '')}" if name == "commit.failed" else name
            counts[key] = counts.get(key, 0) + 1
    return counts
