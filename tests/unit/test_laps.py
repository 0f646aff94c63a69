"""A slow step of the processing thread is logged with the parts that took the time."""

from __future__ import annotations

from structlog.testing import capture_logs

from worker.clock import FakeClock
from worker.laps import Laps


def _step(laps: Laps, clock: FakeClock, parts: dict[str, float]) -> float:
    laps.start()
    for part, seconds in parts.items():
        clock.advance(seconds)
        laps.lap(part)
    return laps.finish(member="stable")


def test_a_slow_step_names_the_parts_that_took_its_time() -> None:
    clock = FakeClock()
    laps = Laps("loop.slow_iteration", clock.monotonic, slow_s=0.3)
    with capture_logs() as logs:
        took = _step(laps, clock, {"member_poll": 0.001, "membership": 1.2, "consume": 0.1})
    assert round(took, 3) == 1.301
    assert logs == [
        {
            "event": "loop.slow_iteration",
            "log_level": "info",
            "seconds": 1.301,
            "parts": {"membership": 1.2, "consume": 0.1},
            "member": "stable",
        }
    ]


def test_a_quick_step_is_not_logged_and_each_step_counts_from_its_own_start() -> None:
    clock = FakeClock()
    laps = Laps("loop.slow_iteration", clock.monotonic, slow_s=0.3)
    with capture_logs() as logs:
        _step(laps, clock, {"consume": 0.2})
        clock.advance(5.0)  # between two iterations: not part of either
        _step(laps, clock, {"consume": 0.1, "commit": 0.1})
    assert logs == []
