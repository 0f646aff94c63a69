"""Stream-time punctuation against a model: once per check that crosses a boundary."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.clock import FakeClock
from worker.processing.punctuation import Punctuations


def boundaries_in(low: int, high: int, interval: int, phase: int) -> int:
    """How many ``k * interval + phase`` lie in (low, high]."""
    return (high - phase) // interval - (low - phase) // interval


@given(
    start=st.integers(min_value=-1, max_value=10_000),
    interval=st.integers(min_value=1, max_value=5_000),
    phase_fraction=st.floats(min_value=0, max_value=0.999),
    steps=st.lists(st.integers(min_value=-2_000, max_value=20_000), max_size=40),
)
def test_fires_once_per_check_that_crosses_a_boundary_and_never_for_a_passed_one(
    start: int, interval: int, phase_fraction: float, steps: list[int]
) -> None:
    phase = int(interval * phase_fraction)
    queue = Punctuations(FakeClock(), stream_time_ms=start)
    calls: list[int] = []
    queue.schedule(interval, "stream", calls.append, phase_ms=phase)

    expected: list[int] = []
    last = start
    now = start
    for step in steps:
        now = max(0, now + step)  # observed times may go back; stream time may not
        queue.punctuate_stream(now)
        if now > last:
            if boundaries_in(last, now, interval, phase) > 0:
                expected.append(now)
            last = now

    assert calls == expected
