"""A hand-over whose old owner dies mid hand-over (worker/tasks/handover.py).

Two exactly-once workers ``a`` and ``b`` share the six tasks of ``worker.examples.counting``
while input flows; ``c`` joins. The round that lets ``c`` in moves a task of ``a`` and one
of ``b`` to it. One of the two old owners (the *victim*, never the round's leader) is
frozen (SIGSTOP) as soon as the leader has planned that round, so it is in the round but
never releases its task; then it is killed. ``c`` holds that task as a standby awaiting
the release, which never comes; once the victim's session has expired, the next
rebalance gives it to ``c`` outright. Every input still has exactly one committed output,
read as Kafka's ``read_committed`` does (tests/support/transaction_log.py).

Why the leader's plan is the moment to freeze: a member that logged it started joining
may not have sent its JoinGroup yet (the join runs on kafka-python's IO thread), and
freezing it then leaves it out of the round altogether, so ``c`` gets its tasks outright
and nothing awaits a release. Once the leader has planned, every member of the round
has joined; a follower's release needs the leader's SyncGroup, its own SyncGroup answer
and a commit after that, while a leader frozen before its SyncGroup would stall the
whole round until its session expired.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.integration.test_cooperative_rebalance import (
    Inputs,
    Outcome,
    check,
    flowing,
    new_worker,
    now_ms,
    wait_for_output_after,
    wait_settled,
)
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]


def planned_since(worker: WorkerProcess, since_ms: int) -> bool:
    """The worker, as the group's leader, planned a round after ``since_ms`` that moves
    a task (its ``membership.assign`` line)."""
    return any(
        e.get("event") == "membership.assign" and e.get("moves") and _ms(e) >= since_ms
        for e in worker.log_events()
    )


def awaited(worker: WorkerProcess) -> list[str]:
    """The tasks the worker's latest applied assignment left awaiting a release."""
    applied = [e for e in worker.log_events() if e.get("event") == "assignment.applied"]
    return list(applied[-1].get("awaiting_release", [])) if applied else []


def _ms(event: dict[str, Any]) -> int:
    from datetime import datetime

    stamp = str(event.get("timestamp", "")).replace("Z", "+00:00")
    return int(datetime.fromisoformat(stamp).timestamp() * 1000) if stamp else 0


@pytest.mark.duration(45)
def test_a_release_that_never_comes_falls_back_to_the_next_rebalance(own_broker, worker_factory):
    bootstrap = own_broker.bootstrap
    inputs = Inputs(bootstrap)
    a, b = (new_worker(worker_factory, n, bootstrap, "exactly_once_v2") for n in ("a", "b"))
    wait_settled([a, b], "a and b")
    c = new_worker(worker_factory, "c", bootstrap, "exactly_once_v2", start=False)
    with flowing(inputs) as watch:
        wait_for_output_after(watch, now_ms(), "every task processing")
        started = now_ms()
        c.start()
        leader = wait_until(
            lambda: next((w for w in (a, b, c) if planned_since(w, started)), None),
            30,
            interval=0.01,
            message="the round that lets c in planned",
        )
        victim, survivor = (b, a) if leader is not b else (a, b)
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGSTOP)  # in the round, before it can release anything
        waiting = wait_until(lambda: awaited(c), 30, interval=0.1, message="c awaiting a release")
        assert victim.kill() == -9
        wait_settled([survivor, c], f"{survivor.name} and c after {victim.name}'s session expired")
        assert not awaited(c), f"{waiting} taken over outright"
        wait_for_output_after(watch, now_ms(), "every task producing again")
    check(Outcome(inputs, [survivor, c], []), exactly_once=True)
