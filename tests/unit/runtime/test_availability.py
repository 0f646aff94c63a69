"""AvailabilityTracker: stalled seconds charged to the right task and cause, by the rule of
its module doc, read back from the Prometheus registry and from what ``/tasks`` shows.

Clock steps are multiples of 1/4 s, exact in binary, so charges compare with ``==``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.clock import FakeClock
from worker.observability import Metrics
from worker.runtime.availability import AvailabilityTracker, StallCause, TaskSample

INTERVAL = 0.25


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tracker(metrics: Metrics, clock: FakeClock) -> AvailabilityTracker:
    return AvailabilityTracker(metrics, clock, INTERVAL)


def charged(metrics: Metrics, task: str, cause: str) -> float | None:
    return metrics.registry.get_sample_value(
        "worker_task_unavailable_seconds_total", {"task": task, "cause": cause}
    )


def waiting(task: str, processed: int, cause: StallCause | None = None) -> TaskSample:
    return TaskSample(task, processed, input_waiting=True, cause=cause)


def step(
    tracker: AvailabilityTracker, clock: FakeClock, seconds: float, *samples: TaskSample
) -> None:
    """Advance the clock by ``seconds``, then observe one loop iteration's samples."""
    clock.advance(seconds)
    tracker.observe(samples)


def test_a_forced_stall_of_known_length_is_charged_to_its_task_and_cause_exactly(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_1", 10, StallCause.RESTORE), waiting("0_2", 7)])
    for n in range(1, 13):  # 3 s: 0_1 restores with input waiting, 0_2 processes
        step(
            tracker, clock, INTERVAL, waiting("0_1", 10, StallCause.RESTORE), waiting("0_2", 7 + n)
        )
    step(tracker, clock, INTERVAL, waiting("0_1", 11), waiting("0_2", 20))

    assert charged(metrics, "0_1", "restore") == 3.0
    assert tracker.unavailable_seconds("0_1") == {"restore": 3.0}
    assert charged(metrics, "0_2", "restore") is None
    assert charged(metrics, "0_2", "other") is None
    assert tracker.unavailable_seconds("0_2") == {}


def test_a_task_without_input_waiting_is_idle_not_unavailable(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    idle = TaskSample("0_0", 5, input_waiting=False, cause=StallCause.REBALANCE)
    tracker.observe([idle])
    for _ in range(8):
        step(tracker, clock, INTERVAL, idle)

    assert charged(metrics, "0_0", "rebalance") is None
    assert tracker.unavailable_seconds("0_0") == {}


def test_input_that_arrives_between_observations_is_not_charged_before_it_is_seen(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([TaskSample("0_0", 5, input_waiting=False, cause=None)])
    step(tracker, clock, 1.0, waiting("0_0", 5, StallCause.BACKPRESSURE))
    step(tracker, clock, 0.5, waiting("0_0", 5, StallCause.BACKPRESSURE))

    assert charged(metrics, "0_0", "backpressure") == 0.5


def test_nothing_is_charged_while_processing_advances_even_with_a_cause(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_0", 0, StallCause.BROKER)])
    for processed in range(1, 9):
        step(tracker, clock, INTERVAL, waiting("0_0", processed, StallCause.BROKER))

    assert charged(metrics, "0_0", "broker") is None


def test_a_processed_count_that_drops_is_a_recreated_task_and_counts_as_progress(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_0", 40, StallCause.REVIVE)])
    step(tracker, clock, 2.0, waiting("0_0", 0, StallCause.REVIVE))
    step(tracker, clock, 1.5, waiting("0_0", 0))

    assert charged(metrics, "0_0", "revive") == 1.5


def test_a_cause_switching_mid_stall_charges_each_part_to_its_own_cause(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_3", 4, StallCause.REBALANCE)])
    step(tracker, clock, 1.0, waiting("0_3", 4, StallCause.REBALANCE))
    step(tracker, clock, 0.5, waiting("0_3", 4, StallCause.RESTORE))
    step(tracker, clock, 2.0, waiting("0_3", 4, StallCause.RESTORE))
    step(tracker, clock, 0.25, waiting("0_3", 4))
    step(tracker, clock, 0.75, waiting("0_3", 4))
    step(tracker, clock, 0.25, waiting("0_3", 5))

    assert charged(metrics, "0_3", "rebalance") == 1.5
    assert charged(metrics, "0_3", "restore") == 2.25
    assert charged(metrics, "0_3", "other") == 0.75
    assert tracker.unavailable_seconds("0_3") == {"other": 0.75, "rebalance": 1.5, "restore": 2.25}


def test_a_long_blocking_iteration_is_charged_in_full_at_the_next_observation(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_0", 3, StallCause.BROKER), waiting("0_1", 3)])
    step(tracker, clock, 7.5, waiting("0_0", 3, StallCause.BROKER), waiting("0_1", 3))

    assert charged(metrics, "0_0", "broker") == 7.5
    assert charged(metrics, "0_1", "other") == 7.5


def test_a_stall_that_began_after_the_last_sample_takes_the_cause_learnt_at_its_end(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_0", 3)])
    step(tracker, clock, 4.0, waiting("0_0", 3, StallCause.REBALANCE))

    assert charged(metrics, "0_0", "rebalance") == 4.0
    assert charged(metrics, "0_0", "other") is None


def test_observations_are_throttled_to_the_interval_and_skipped_samples_never_built(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    built: list[float] = []

    def samples() -> Iterator[TaskSample]:
        built.append(clock.now)
        yield waiting("0_0", 1, StallCause.RESTORE)

    tracker.observe(samples())
    for _ in range(10):  # every 1/8 s for 1.25 s: an observation every other iteration
        clock.advance(0.125)
        tracker.observe(samples())

    assert built == [1000.0 + 0.25 * n for n in range(6)]
    assert charged(metrics, "0_0", "restore") == 1.25


def test_forget_restarts_the_clock_and_keeps_the_totals(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_0", 2, StallCause.RESTORE)])
    step(tracker, clock, 1.0, waiting("0_0", 2, StallCause.RESTORE))
    tracker.forget("0_0")
    tracker.forget("0_0")  # idempotent
    step(tracker, clock, 30.0, waiting("0_0", 2, StallCause.RESTORE))
    step(tracker, clock, 0.5, waiting("0_0", 2, StallCause.RESTORE))

    assert charged(metrics, "0_0", "restore") == 1.5
    assert tracker.unavailable_seconds("0_0") == {"restore": 1.5}


def test_a_task_missing_from_an_observation_is_forgotten(
    tracker: AvailabilityTracker, clock: FakeClock, metrics: Metrics
) -> None:
    tracker.observe([waiting("0_0", 2, StallCause.RESTORE), waiting("0_1", 2)])
    step(tracker, clock, 1.0, waiting("0_1", 3))
    step(tracker, clock, 1.0, waiting("0_0", 2, StallCause.RESTORE), waiting("0_1", 4))
    step(tracker, clock, 0.25, waiting("0_0", 2, StallCause.RESTORE), waiting("0_1", 5))

    assert charged(metrics, "0_0", "restore") == 0.25


def test_an_unknown_task_has_no_unavailable_seconds(tracker: AvailabilityTracker) -> None:
    assert tracker.unavailable_seconds("9_9") == {}


def test_the_cause_labels_are_the_documented_ones() -> None:
    assert [c.value for c in StallCause] == [
        "rebalance", "restore", "revive", "broker", "backpressure", "task_idle", "other",
    ]  # fmt: skip
