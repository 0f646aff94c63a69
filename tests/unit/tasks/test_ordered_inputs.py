"""Tasks reading several partitions, through the router with real tasks and stores: their
records are processed in timestamp order, buffered ones are not consumed (never
committed, dropped and read again when the task stops reading), and a partition holding
too many while its task waits is paused.

The harness's task reads ``events`` and the ``labels`` table; its fake consumer returns
``events`` first in every batch, so fetch order would run the events first.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.tasks.conftest import EVENTS, LABELS, OUT, T00, Harness, assignment, encode
from worker.assignment.task_id import TP
from worker.tasks.state import TaskState

EV: TP = (EVENTS, 0)
LB: TP = (LABELS, 0)


def running(h: Harness) -> None:
    h.assign(T00)
    h.restore()
    assert h.manager.tasks[T00].state is TaskState.RUNNING


def event(h: Harness, key: str, at: int) -> int:
    return h.consumer.append(EVENTS, 0, key.encode(), encode({}), timestamp=at)


def label(h: Harness, key: str, value: str, at: int) -> int:
    return h.consumer.append(LABELS, 0, key.encode(), encode(value), timestamp=at)


def waiting_for_the_table(h: Harness) -> None:
    """An event buffered behind a table whose fetch has not reached its end: one label of
    two fetched and processed, the event (newer than both) waiting."""
    running(h)
    event(h, "a", 300)
    label(h, "a", "red", 100)
    label(h, "a", "blue", 200)
    assert h.router.process(h.consumer.consume(2, 0.0)) == 1


def outputs(h: Harness) -> list[Any]:
    return [orjson.loads(r.value) for r in h.collector.sent if r.topic == OUT and r.value]


def test_an_event_fetched_ahead_of_an_older_label_sees_the_label(harness: Harness) -> None:
    running(harness)
    event(harness, "a", 50)
    event(harness, "a", 200)
    label(harness, "a", "red", 100)

    assert harness.process() == 3

    assert outputs(harness) == [{"n": 1, "label": None}, {"n": 2, "label": "red"}]


def test_buffered_records_are_not_committed_until_processed(harness: Harness) -> None:
    waiting_for_the_table(harness)

    assert harness.metric("worker_buffered_records", task="0_0") == 1
    assert harness.commits.commit()
    assert harness.group_offsets.commits[-1] == {LB: 1}

    assert harness.process() == 2
    assert outputs(harness) == [{"n": 1, "label": "blue"}]
    assert harness.commits.commit()
    assert harness.group_offsets.commits[-1] == {LB: 2, EV: 1}


def test_a_revoked_task_drops_its_buffered_records_and_reads_them_again(
    harness: Harness,
) -> None:
    waiting_for_the_table(harness)

    harness.manager.on_assigned(assignment(generation=2))  # revoked: committed and closed
    assert harness.group_offsets.offsets == {LB: 1}
    harness.manager.on_assigned(assignment(T00, generation=3))
    harness.restore()
    assert harness.process() == 2

    assert outputs(harness) == [{"n": 1, "label": "blue"}]  # the event once, in order


def test_a_revived_task_drops_its_buffered_records_and_reads_them_again(
    harness: Harness,
) -> None:
    waiting_for_the_table(harness)
    harness.commits.commit()

    harness.tasks.revive([harness.manager.tasks[T00]], "test", "revived by the test")
    assert harness.metric("worker_buffered_records", task="0_0") == 0
    harness.restore()
    assert harness.process() == 2

    assert outputs(harness) == [{"n": 1, "label": "blue"}]


@pytest.mark.parametrize("buffered_records", [1000, 40])
def test_a_partition_holding_too_much_while_its_task_waits_is_paused_then_resumed(
    harness: Harness, buffered_records: int
) -> None:
    running(harness)
    for i in range(buffered_records + 1):
        event(harness, f"k{i % 7}", 1_000 + i)
    label(harness, "a", "red", 100)
    label(harness, "a", "blue", 200)

    harness.router.process(harness.consumer.consume(buffered_records + 2, 0.0))
    assert harness.consumer.paused == {EV}

    assert harness.process() == buffered_records + 2
    assert harness.consumer.paused == set()
    assert len(outputs(harness)) == buffered_records + 1


def test_records_processed_without_an_empty_partition_are_counted_as_enforced(
    harness: Harness,
) -> None:
    running(harness)
    label(harness, "a", "red", 100)
    event(harness, "a", 200)
    event(harness, "a", 300)

    assert harness.process() == 3

    # The label went first with both partitions holding records; the events once the
    # table was at its end and empty.
    assert harness.metric("worker_enforced_processing_total", task="0_0") == 2
