"""The partition group's choice: which buffered record a task reading several partitions
processes next, and when it waits (``max.task.idle.ms``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.unit.tasks.conftest import EVENTS, LABELS, build_topology
from worker.assignment.task_id import TP
from worker.clock import FakeClock
from worker.processing.timestamps import WALL_CLOCK
from worker.tasks.partition_group import PartitionGroup, ranked_partitions, timestamp_reader
from worker.testing.logs import LogRecord

TABLE: TP = (LABELS, 0)
STREAM: TP = (EVENTS, 0)


def records(tp: TP, *times: int, first: int = 0) -> list[LogRecord]:
    return [LogRecord(tp[0], tp[1], first + i, b"k", b"v", t) for i, t in enumerate(times)]


def group(clock: FakeClock, idle_ms: int = 0, max_buffered: int = 1000) -> PartitionGroup:
    return PartitionGroup([TABLE, STREAM], idle_ms, clock, lambda r: r.timestamp()[1], max_buffered)


def add(g: PartitionGroup, batch: Sequence[LogRecord]) -> None:
    g.add(batch, 0, len(batch))


def drain(g: PartitionGroup) -> list[tuple[str, int]]:
    """Process every run the group gives; (topic, timestamp) of each record in order."""
    done: list[tuple[str, int]] = []
    while (run := g.next_run()) is not None:
        done += [(r.topic(), r.timestamp()[1]) for r in run.records[run.start : run.stop]]
        g.consumed(run, run.stop)
    return done


def at_end(g: PartitionGroup, *tps: TP) -> None:
    for tp in tps:
        g.reached_end(tp, 1_000_000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_the_head_with_the_smallest_timestamp_goes_first_across_partitions(
    clock: FakeClock,
) -> None:
    g = group(clock)
    add(g, records(STREAM, 10, 30, 50))
    add(g, records(TABLE, 20, 40))
    at_end(g, TABLE, STREAM)

    assert drain(g) == [
        (EVENTS, 10),
        (LABELS, 20),
        (EVENTS, 30),
        (LABELS, 40),
        (EVENTS, 50),
    ]
    assert g.buffered == 0


def test_a_run_takes_every_record_before_the_other_partitions_head(clock: FakeClock) -> None:
    g = group(clock)
    add(g, records(STREAM, 1, 2, 3, 9))
    add(g, records(TABLE, 5))
    at_end(g, TABLE, STREAM)

    run = g.next_run()

    assert run is not None and (run.partition, run.start, run.stop) == (STREAM, 0, 3)


def test_within_a_partition_offset_order_stands_whatever_the_timestamps(
    clock: FakeClock,
) -> None:
    g = group(clock)
    add(g, records(STREAM, 30, 10))
    add(g, records(TABLE, 20))
    at_end(g, TABLE, STREAM)

    assert drain(g) == [(LABELS, 20), (EVENTS, 30), (EVENTS, 10)]


def test_on_equal_timestamps_the_table_goes_first(clock: FakeClock) -> None:
    g = group(clock)
    add(g, records(STREAM, 5, 5))
    add(g, records(TABLE, 5))
    at_end(g, TABLE, STREAM)

    assert drain(g) == [(LABELS, 5), (EVENTS, 5), (EVENTS, 5)]


def test_tables_rank_first_then_the_sources_in_their_order() -> None:
    ranked = ranked_partitions(build_topology().subtopologies[0], 3)

    assert ranked == [(LABELS, 3), (EVENTS, 3)]  # events was added first


def test_under_0_a_task_waits_for_a_partition_whose_end_is_not_known(clock: FakeClock) -> None:
    g = group(clock, idle_ms=0)
    add(g, records(STREAM, 10))

    assert g.next_run() is None  # the table's fetch has reported nothing yet

    g.reached_end(TABLE, 0)
    run = g.next_run()
    assert run is not None and run.partition == STREAM and run.enforced


def test_waiting_says_records_are_held_back_for_an_empty_partition(clock: FakeClock) -> None:
    g = group(clock, idle_ms=0)
    assert g.next_run() is None and not g.waiting, "nothing buffered: nothing held back"

    add(g, records(STREAM, 10))
    assert g.next_run() is None and g.waiting

    g.clear()  # the task stopped reading: nothing is held back any more
    assert not g.waiting

    add(g, records(STREAM, 10))
    assert g.next_run() is None and g.waiting
    g.reached_end(TABLE, 0)
    assert g.next_run() is not None and not g.waiting


def test_waiting_lasts_the_idle_time_at_an_empty_partitions_end(clock: FakeClock) -> None:
    g = group(clock, idle_ms=500)
    add(g, records(STREAM, 10))
    g.reached_end(TABLE, 0)
    assert g.next_run() is None and g.waiting

    clock.advance(0.5)
    assert g.next_run() is not None and not g.waiting


def test_under_0_a_task_waits_while_records_came_after_the_last_end(clock: FakeClock) -> None:
    g = group(clock, idle_ms=0)
    g.reached_end(TABLE, 3)
    add(g, records(TABLE, 1, first=3))  # the end moved on: more may be on the broker
    add(g, records(STREAM, 10, 20))
    g.reached_end(STREAM, 2)

    assert drain(g) == [(LABELS, 1)]
    assert g.next_run() is None

    g.reached_end(TABLE, 4)
    assert drain(g) == [(EVENTS, 10), (EVENTS, 20)]


def test_a_full_partition_is_not_waited_for_and_nothing_is_enforced(clock: FakeClock) -> None:
    g = group(clock, idle_ms=0)
    add(g, records(STREAM, 10))
    add(g, records(TABLE, 20))

    run = g.next_run()

    assert run is not None and run.partition == STREAM and not run.enforced


def test_under_n_a_partition_at_its_end_is_waited_for_n_ms_then_processing_is_enforced(
    clock: FakeClock,
) -> None:
    g = group(clock, idle_ms=500)
    at_end(g, TABLE)
    add(g, records(STREAM, 10))

    assert g.next_run() is None
    clock.advance(0.499)
    assert g.next_run() is None
    clock.advance(0.001)
    run = g.next_run()
    assert run is not None and run.enforced


def test_under_n_the_wait_starts_again_once_the_partition_had_data(clock: FakeClock) -> None:
    g = group(clock, idle_ms=500)
    at_end(g, TABLE)
    add(g, records(STREAM, 10))
    assert g.next_run() is None
    clock.advance(0.5)
    assert drain(g) == [(EVENTS, 10)]

    add(g, records(TABLE, 20, first=1_000_000))
    g.reached_end(TABLE, 1_000_001)
    add(g, records(STREAM, 30, first=1))
    assert drain(g) == [(LABELS, 20)]  # then the table is empty again: a new wait
    assert g.next_run() is None
    clock.advance(0.5)
    assert drain(g) == [(EVENTS, 30)]


def test_under_minus_1_whatever_is_buffered_is_processed_without_counting(
    clock: FakeClock,
) -> None:
    g = group(clock, idle_ms=-1)
    add(g, records(STREAM, 30))

    run = g.next_run()

    assert run is not None and run.partition == STREAM and not run.enforced


def test_a_run_stopped_early_leaves_the_rest_buffered_from_where_it_stopped(
    clock: FakeClock,
) -> None:
    g = group(clock)
    add(g, records(STREAM, 1, 2, 3))
    add(g, records(TABLE, 7))
    at_end(g, TABLE, STREAM)
    run = g.next_run()
    assert run is not None and run.stop == 3

    g.consumed(run, 1)  # the record at index 1 failed and was handled

    assert drain(g) == [(EVENTS, 2), (EVENTS, 3), (LABELS, 7)]


def test_a_partition_over_the_bound_after_processing_pauses_and_resumes_when_drained(
    clock: FakeClock,
) -> None:
    g = group(clock, max_buffered=2)
    add(g, records(STREAM, 10, 20, 30))
    add(g, records(TABLE, 5))
    g.reached_end(STREAM, 3)

    assert drain(g) == [(LABELS, 5)]  # then it waits: the table's end is not known
    assert g.flow() == ([STREAM], [])
    assert g.flow() == ([], [])  # paused once

    g.reached_end(TABLE, 1)
    assert drain(g) == [(EVENTS, 10), (EVENTS, 20), (EVENTS, 30)]
    assert g.flow() == ([], [STREAM])


def test_clearing_drops_the_records_and_what_the_fetches_reported(clock: FakeClock) -> None:
    g = group(clock)
    add(g, records(STREAM, 10))
    at_end(g, TABLE, STREAM)
    run = g.next_run()
    assert run is not None

    g.clear()
    g.consumed(run, run.stop)  # a run handed out before is ignored

    assert g.buffered == 0
    add(g, records(STREAM, 10))
    assert g.next_run() is None  # the table's end must be reported again


def test_a_long_queue_drops_its_processed_head(clock: FakeClock) -> None:
    g = group(clock, idle_ms=-1, max_buffered=100_000)
    add(g, records(STREAM, *range(10_000)))
    add(g, records(TABLE, 6_000))

    assert len(drain(g)) == 10_001
    assert g.buffered == 0


def test_the_timestamp_reader_uses_the_extractor_and_orders_invalid_times_first() -> None:
    record = LogRecord(EVENTS, 0, 0, b"k", b"v", 42)
    assert timestamp_reader("record", lambda: -1)(record) == 42
    assert timestamp_reader(f"{__name__}:_broken", lambda: -1)(record) == -1
    assert timestamp_reader(f"{__name__}:_negative", lambda: -1)(record) == -1
    assert timestamp_reader(f"{__name__}:_plus_stream_time", lambda: 7)(record) == 49
    assert timestamp_reader(WALL_CLOCK, lambda: -1)(record) > 1_600_000_000_000


def _broken(record: Any, stream_time: int) -> int:
    raise ValueError("no time")


def _negative(record: Any, stream_time: int) -> int:
    return -5


def _plus_stream_time(record: Any, stream_time: int) -> int:
    return int(record.timestamp()[1]) + stream_time
