"""kill -9 in the middle of processing: no torn state, no committed input lost."""

from __future__ import annotations

import pytest

from tests.integration.example_app import PARTITIONS, example_data
from tests.support.kafka_io import fold, read_partition
from tests.support.traffic import SteadyProducer
from tests.support.waiting import wait_until
from worker.assignment.task_id import TaskId
from worker.events import MEMBERSHIP_ASSIGNED, MEMBERSHIP_STALE_MEMBER_REMOVED
from worker.examples import payments as app
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]


def _assert_stores_match_their_offsets(state_dir, application_id, bootstrap):
    """Each store holds exactly the changelog folded up to the offset stored with it."""
    env = RocksDBEnv(64 * 1024 * 1024)
    checked = 0
    for partition in range(PARTITIONS):
        # The totals of the scoring sub-topology, the versioned profiles of the joins'.
        for subtopology, store_name in ((0, app.TOTALS), (1, app.PROFILES)):
            topic = f"{application_id}-{store_name}-changelog"
            task_dir = state_dir / application_id / str(TaskId(subtopology, partition))
            store = Store.open(task_dir / "rocksdb" / store_name, env, store_name)
            try:
                offset = store.committed_offsets().get((topic, partition))
                contents = dict(store.iter_committed())
            finally:
                store.close()
            if offset is None:
                assert contents == {}, f"{store_name} {partition}: data without an offset"
                continue
            implied = fold(read_partition(bootstrap, topic, partition, until=offset))
            assert contents == implied, f"{store_name} {partition}: torn at offset {offset}"
            checked += 1
    assert checked >= PARTITIONS, "the kill should leave committed state behind"


@pytest.mark.duration(50)
def test_kill_9_mid_processing_leaves_consistent_state_and_loses_no_input(
    own_broker, worker_factory
):
    data = example_data(own_broker.bootstrap)
    # A session long enough that the killed run is still a member when the restart joins.
    settings = {
        "commit.interval.ms": 200,
        "bootstrap.servers": own_broker.bootstrap,
        "session.timeout.ms": 30000,
    }
    w = worker_factory("victim", settings=settings)
    w.wait_ready(90)
    data.produce(20000)
    with SteadyProducer(data, per_tick=500, tick=0.05):  # keeps the worker busy when killed
        wait_until(
            lambda: (
                w.metric("worker_processed_records_total") > 20000
                and w.metric("worker_commits_total", result="committed") >= 3
            ),
            60,
            message="processing well under way",
        )
        assert w.kill() == -9

    _assert_stores_match_their_offsets(
        w.state_dir, worker_factory.application_id, own_broker.bootstrap
    )

    w.start()
    w.wait_ready(90)
    # The restart removed the killed run's member from the group before joining, so its
    # first assignment already holds every task (none left to the dead member).
    events = w.log_events()
    removed = [i for i, e in enumerate(events) if e.get("event") == MEMBERSHIP_STALE_MEMBER_REMOVED]
    assert len(removed) == 1 and events[removed[0]]["error"] is None
    first = next(e for e in events[removed[0] :] if e.get("event") == MEMBERSHIP_ASSIGNED)
    assert len(first["active"]) == 2 * PARTITIONS  # the scoring and the joins tasks
    expected_totals, expected_alerts = data.reference()
    wait_until(
        lambda: {a["payment_id"] for a in data.alerts()} >= set(expected_alerts),
        90,
        message="every expected alert present after the restart",
    )
    # At least once: every payment counted, some possibly twice; never fewer.
    totals = wait_until(
        lambda: _totals_if_complete(data, worker_factory.application_id, expected_totals),
        60,
        message="every account's count reaches the reference",
    )
    for account, expected in expected_totals.items():
        assert totals[account]["count"] >= expected["count"]


def _totals_if_complete(data, application_id, expected_totals):
    totals = data.totals_from_changelog(application_id)
    complete = all(
        account in totals and totals[account]["count"] >= want["count"]
        for account, want in expected_totals.items()
    )
    return totals if complete else None
