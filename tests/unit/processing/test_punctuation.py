"""Punctuation schedules: stream-time boundaries, wall-clock intervals, cancel, errors."""

from __future__ import annotations

import pytest

from worker.clock import FakeClock
from worker.processing.punctuation import (
    PunctuationKind,
    Punctuations,
    PunctuatorFailed,
    next_boundary,
)


def test_next_boundary_is_the_first_aligned_point_strictly_after() -> None:
    assert next_boundary(-1, 1000) == 0
    assert next_boundary(0, 1000) == 1000
    assert next_boundary(999, 1000) == 1000
    assert next_boundary(1000, 1000) == 2000
    assert next_boundary(1000, 1000, phase_ms=250) == 1250
    assert next_boundary(1250, 1000, phase_ms=250) == 2250
    assert next_boundary(100, 1000, phase_ms=250) == 250


def test_a_stream_punctuator_fires_on_epoch_aligned_boundaries_with_the_current_time() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=10_500)
    calls: list[int] = []
    queue.schedule(1000, "stream", calls.append)

    assert queue.punctuate_stream(10_999) == 0
    assert queue.punctuate_stream(11_000) == 1
    assert queue.punctuate_stream(11_400) == 0
    assert queue.punctuate_stream(12_300) == 1

    assert calls == [11_000, 12_300]


def test_boundaries_passed_in_one_check_fire_once() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    calls: list[int] = []
    queue.schedule(1000, PunctuationKind.STREAM, calls.append)

    queue.punctuate_stream(5_500)
    queue.punctuate_stream(5_900)
    queue.punctuate_stream(6_000)

    assert calls == [5_500, 6_000]


def test_a_boundary_at_or_before_the_registration_stream_time_does_not_fire() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=3_000)
    calls: list[int] = []
    queue.schedule(1000, "stream", calls.append)

    queue.punctuate_stream(3_000)
    queue.punctuate_stream(3_999)

    assert calls == []


def test_with_no_stream_time_yet_the_first_record_crosses_the_epoch_boundary() -> None:
    queue = Punctuations(FakeClock())
    calls: list[int] = []
    queue.schedule(60_000, "stream", calls.append)

    queue.punctuate_stream(0)

    assert calls == [0]


def test_the_phase_shifts_the_boundaries() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    calls: list[int] = []
    queue.schedule(1000, "stream", calls.append, phase_ms=300)

    for t in (299, 300, 1299, 1300):
        queue.punctuate_stream(t)

    assert calls == [300, 1300]


def test_stream_time_going_back_is_ignored() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    calls: list[int] = []
    queue.schedule(1000, "stream", calls.append)

    queue.punctuate_stream(1_500)
    queue.punctuate_stream(900)
    queue.punctuate_stream(1_999)

    assert calls == [1_500]
    assert queue.stream_time_ms == 1_999


def test_a_wall_punctuator_first_fires_one_interval_after_registration() -> None:
    clock = FakeClock(now=100.0)
    queue = Punctuations(clock)
    calls: list[int] = []
    queue.schedule(500, "wall", calls.append)

    clock.advance(0.499)
    assert queue.punctuate_wall() == 0
    clock.advance(0.001)
    assert queue.punctuate_wall() == 1

    assert calls == [100_500]  # the wall time in epoch ms (the fake's wall is its monotonic)


def test_missed_wall_fires_are_skipped_and_the_grid_is_kept() -> None:
    clock = FakeClock(now=0.0)
    queue = Punctuations(clock)
    calls: list[int] = []
    schedule = queue.schedule(1000, "wall", calls.append)

    clock.advance(3.7)
    queue.punctuate_wall()
    queue.punctuate_wall()

    assert calls == [3_700]
    assert schedule.next_due_ms == 4_000


def test_wall_schedules_ignore_stream_time_and_stream_schedules_ignore_the_clock() -> None:
    clock = FakeClock(now=0.0)
    queue = Punctuations(clock, stream_time_ms=0)
    stream_calls: list[int] = []
    wall_calls: list[int] = []
    queue.schedule(1000, "stream", stream_calls.append)
    queue.schedule(1000, "wall", wall_calls.append)

    clock.advance(5.0)
    queue.punctuate(stream_time_ms=10)
    queue.punctuate(stream_time_ms=1_000)

    assert stream_calls == [1_000]
    assert wall_calls == [5_000]


def test_a_cancelled_schedule_never_fires_again() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    calls: list[int] = []
    schedule = queue.schedule(1000, "stream", calls.append)
    queue.punctuate_stream(1_000)

    schedule.cancel()
    schedule.cancel()
    queue.punctuate_stream(5_000)

    assert calls == [1_000]
    assert len(queue) == 0


def test_a_punctuator_may_cancel_itself_and_others_while_firing() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    calls: list[str] = []
    schedules = {}

    def first(now: int) -> None:
        calls.append("first")
        schedules["first"].cancel()
        schedules["second"].cancel()

    schedules["first"] = queue.schedule(1000, "stream", first)
    schedules["second"] = queue.schedule(1000, "stream", lambda now: calls.append("second"))
    queue.punctuate_stream(1_000)
    queue.punctuate_stream(2_000)

    assert calls == ["first"]


def test_a_schedule_registered_while_firing_waits_for_its_own_boundary() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    calls: list[str] = []

    def register(now: int) -> None:
        calls.append("outer")
        queue.schedule(1000, "stream", lambda now: calls.append("inner"))

    outer = queue.schedule(1000, "stream", register)
    queue.punctuate_stream(1_000)
    assert calls == ["outer"]

    outer.cancel()
    queue.punctuate_stream(2_000)
    assert calls == ["outer", "inner"]


def test_many_cancels_keep_the_heap_small() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    for _ in range(100):
        queue.schedule(1000, "stream", lambda now: None).cancel()
    keeper = queue.schedule(1000, "stream", lambda now: None)

    assert len(queue) == 1
    assert sum(len(h) for h in queue._heaps.values()) <= 2
    assert not keeper.cancelled


def test_clear_drops_every_schedule() -> None:
    clock = FakeClock(now=0.0)
    queue = Punctuations(clock, stream_time_ms=0)
    calls: list[int] = []
    stream = queue.schedule(1000, "stream", calls.append)
    queue.schedule(1000, "wall", calls.append)

    queue.clear()
    clock.advance(10)
    queue.punctuate(10_000)
    stream.cancel()

    assert calls == []
    assert len(queue) == 0


def test_a_raising_punctuator_is_named_and_not_retried_in_a_loop() -> None:
    queue = Punctuations(FakeClock(), stream_time_ms=0)
    others: list[int] = []

    def boom(now: int) -> None:
        raise RuntimeError("bad state")

    queue.schedule(1000, "stream", boom, name="alerts#0")
    queue.schedule(1000, "stream", others.append, name="totals#0")

    with pytest.raises(PunctuatorFailed, match="alerts#0") as caught:
        queue.punctuate_stream(1_000)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.now_ms == 1_000
    assert others == [1_000]  # the other punctuator of the check still ran
    assert queue.punctuate_stream(1_500) == 0


@pytest.mark.parametrize(
    ("interval", "kind", "phase"),
    [
        (0, "stream", 0),
        (1.5, "stream", 0),
        (1000, "stream", 1000),
        (1000, "stream", -1),
        (1000, "wall", 5),
        (1000, "hourly", 0),
    ],
)
def test_bad_schedules_are_refused(interval: object, kind: str, phase: int) -> None:
    queue = Punctuations(FakeClock())

    with pytest.raises(ValueError):
        queue.schedule(interval, kind, lambda now: None, phase_ms=phase)  # type: ignore[arg-type]
