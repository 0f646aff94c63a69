"""Exactly-once output through rebalances, as a ``read_committed`` reader sees it.

The scenarios of tests/integration/test_cooperative_rebalance.py (a rolling restart, a
scale-out from one worker to three) under exactly_once_v2. There the stalls are read
from the outputs' own timestamps, which say when a task processed an input; here each
output counts from the moment its transaction committed (the COMMIT marker's timestamp,
tests/support/transaction_log.py), which is when a ``read_committed`` consumer can
first see it. A task that stays with its owner keeps committing while the group joins
(worker/kafka/membership.py), so its visible output never stops for longer than a
commit interval plus a second; per event, no larger share of the tasks stalls than the
share that changed owner. One output per input is checked by ``check`` as there.

A moved task changes owner in the round that moves it (worker/tasks/handover.py): the
scale-out's moved tasks stall no longer than a staying one may, and each task's
changelog shows one writer at a time, a new one only after its predecessor's release
marker (:func:`check_one_writer_at_a_time`). So do the tasks of a worker stopped with
SIGTERM (a graceful scale-in): it keeps processing them while the group moves them, and
releases them before it leaves (worker/kafka/member_joins.py, "Leaving gracefully"), so
their output hides no longer than a staying task's may.
"""

from __future__ import annotations

import pytest

from tests.integration.test_cooperative_rebalance import (
    PARTITIONS,
    SETTINGS,
    TASKS,
    Inputs,
    Outcome,
    check,
    flowing,
    membership_event,
    new_worker,
    now_ms,
    rolling_restart,
    scale_out,
    wait_for_output_after,
    wait_settled,
)
from tests.support.fixtures import WorkerFactory
from tests.support.transaction_log import read_committed_partition, read_committed_topic
from worker.dev.stalls import longest_stalls, stalled_share
from worker.examples import counting
from worker.state.release_marker import RELEASE_KEY, ReleaseMarker

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]

COMMIT_INTERVAL = int(SETTINGS["commit.interval.ms"]) / 1000
# s: the longest a staying task's output may hide. On Apache Kafka it hid 1.3-1.9 s while
# an assignment that opened tasks with local state waited for their changelogs' ends
# (docs/platform-notes.md, "A staying task's pause on Kafka"); since that read returns at
# once, 0.2-1.1 s, and 1.25 s once, with no step of the worker's loop over 0.3 s, on a
# machine at a load of 5-8 on 2 cores, where the broker took up to 1 s to acknowledge a
# commit's records. The target, commit interval + 1 s, is the availability benchmark's;
# this check allows 0.5 s more for such load.
VISIBLE_STALL = COMMIT_INTERVAL + 1.5
STALLED = 1.5  # s: a task silent longer than this counts as stalled by the event


def visible_at(bootstrap: str) -> dict[str, list[float]]:
    """Per task, when each of its committed outputs became visible (ms)."""
    stamps: dict[str, list[float]] = {t: [] for t in TASKS}
    for partition, record in read_committed_topic(bootstrap, counting.OUTPUTS, PARTITIONS):
        stamps[TASKS[partition]].append(record.visible_at)
    return stamps


def check_visible_stalls(outcome: Outcome, moved_too: bool = False) -> None:
    """Stayed tasks never hid their output longer than ``VISIBLE_STALL``, and with
    ``moved_too`` moved ones neither (taken over in their round: under a follow-up round
    they would wait for one more join, which this broker holds ~3 s); per event no more
    tasks stalled than changed owner."""
    stamps = visible_at(outcome.inputs.bootstrap)
    problems: list[str] = []
    report: list[str] = []
    for event in outcome.events:
        stalls = {
            t: s / 1000 for t, s in longest_stalls(stamps, event.start_ms, event.end_ms).items()
        }
        report.append(
            f"{event.name}: " + ", ".join(f"{t} {event.fate(t)} {stalls[t]:.2f} s" for t in TASKS)
        )
        changed = sum(1 for t in TASKS if event.fate(t) != "stayed") / len(TASKS)
        if stalled_share(stalls, STALLED) > changed:
            problems.append(f"{event.name}: more tasks stalled than changed owner")
        bounded = TASKS if moved_too else event.stayed
        for t in bounded:
            if stalls[t] > VISIBLE_STALL:
                problems.append(
                    f"{event.name}: {t} ({event.fate(t)}) showed nothing for "
                    f"{stalls[t]:.2f} s (> {VISIBLE_STALL:.1f} s)"
                )
    print("\n".join(["visible (read_committed) stalls:", *report]))
    assert not problems, "\n".join(["", *problems, "per event:", *report])


def check_one_writer_at_a_time(bootstrap: str, application_id: str, died: int = -1) -> None:
    """In every task's changelog (committed records, as written), the writer changes only
    right after a release marker of the writer before, or after the producer ``died``
    wrote its last record: two owners never wrote one task's changelog in turn."""
    changelog = f"{application_id}-{counting.COUNTS}-changelog"
    problems = []
    for partition in range(PARTITIONS):
        records = read_committed_partition(bootstrap, changelog, partition)
        for before, after in zip(records, records[1:], strict=False):
            if after.producer_id == before.producer_id or before.producer_id == died:
                continue
            marker = ReleaseMarker.from_headers(before.headers)
            if before.key != RELEASE_KEY or marker is None:
                problems.append(
                    f"{TASKS[partition]}: producer {after.producer_id} wrote at offset "
                    f"{after.offset} after producer {before.producer_id} without its release"
                )
    assert not problems, "\n".join(problems)


@pytest.mark.duration(25)
def test_exactly_once_rolling_restart_keeps_staying_tasks_output_visible(
    own_broker, worker_factory
):
    outcome = rolling_restart(own_broker.bootstrap, worker_factory, "exactly_once_v2")
    check(outcome, exactly_once=True)
    check_visible_stalls(outcome)


@pytest.mark.duration(37)
def test_exactly_once_scale_out_hands_tasks_over_in_one_round(own_broker, worker_factory):
    outcome = scale_out(own_broker.bootstrap, worker_factory, "exactly_once_v2")
    check(outcome, exactly_once=True)
    check_visible_stalls(outcome, moved_too=True)
    check_one_writer_at_a_time(own_broker.bootstrap, worker_factory.application_id)


def scale_in(bootstrap: str, worker_factory: WorkerFactory) -> Outcome:
    """Three exactly-once workers; ``c`` is stopped with SIGTERM and not started again."""
    inputs = Inputs(bootstrap)
    group = [new_worker(worker_factory, n, bootstrap, "exactly_once_v2") for n in "abc"]
    owners = wait_settled(group, "three workers")
    *staying, leaving = group

    def stop() -> None:
        assert leaving.terminate() == 0, "a clean stop exits 0"

    with flowing(inputs) as watch:
        wait_for_output_after(watch, now_ms(), "every task processing")
        event = membership_event("c stops", owners, stop, staying, watch)
    handed = [e for e in leaving.log_events() if e.get("event") == "handover.released"]
    assert handed and handed[-1].get("committed"), "c released its tasks before leaving"
    return Outcome(inputs, staying, [event])


@pytest.mark.duration(30)
def test_exactly_once_scale_in_hands_the_stopped_workers_tasks_over_in_one_round(
    own_broker, worker_factory
):
    outcome = scale_in(own_broker.bootstrap, worker_factory)
    check_visible_stalls(outcome, moved_too=True)
    check_one_writer_at_a_time(own_broker.bootstrap, worker_factory.application_id)
    check(outcome, exactly_once=True)
