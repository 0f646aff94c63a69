"""Start-up steps wait for the broker: retried with backoff, stoppable, logged sparingly."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from worker.clock import FakeClock
from worker.errors import KafkaUnavailable, TopologyError
from worker.events import BROKER_WAITED, BROKER_WAITING
from worker.runtime.broker_wait import (
    LOG_EVERY_S,
    MAX_DELAY_S,
    BrokerWait,
    StartupStopped,
    retry_delay,
)


class FakeStop(threading.Event):
    """A stop event whose waits advance the fake clock instead of sleeping."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        self.clock.advance(timeout or 0.0)
        return self.is_set()


def failing(times: int, result: str = "ok") -> Callable[[], str]:
    left = [times]

    def attempt() -> str:
        if left[0] > 0:
            left[0] -= 1
            raise KafkaUnavailable("cannot read topic metadata: timed out")
        return result

    return attempt


def make() -> tuple[BrokerWait, FakeStop, list[int]]:
    clock = FakeClock()
    stop = FakeStop(clock)
    beats: list[int] = []
    return BrokerWait(stop, clock, lambda: beats.append(1), "127.0.0.1:9"), stop, beats


def test_the_delay_doubles_from_half_a_second_up_to_its_cap() -> None:
    assert [retry_delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, MAX_DELAY_S]
    assert retry_delay(50) == MAX_DELAY_S


def test_a_step_is_retried_until_the_broker_answers_and_every_attempt_beats_the_heart() -> None:
    wait, stop, beats = make()

    assert wait.run("topics", failing(4)) == "ok"

    assert stop.waits == [0.5, 1.0, 2.0, 4.0]
    assert len(beats) == 5


def test_a_stop_request_ends_the_wait_at_once() -> None:
    wait, stop, _ = make()

    def attempt() -> str:
        stop.set()  # SIGTERM arrives while the broker is still away
        raise KafkaUnavailable("down")

    with pytest.raises(StartupStopped):
        wait.run("topics", attempt)
    assert stop.waits == [0.5]


def test_a_stopped_worker_makes_no_attempt() -> None:
    wait, stop, _ = make()
    stop.set()
    with pytest.raises(StartupStopped):
        wait.run("group", failing(0))


def test_errors_that_waiting_cannot_cure_are_raised_at_once() -> None:
    wait, stop, _ = make()

    def attempt() -> str:
        raise TopologyError("topics do not exist: inputs (create them first)")

    with pytest.raises(TopologyError):
        wait.run("topics", attempt)
    assert stop.waits == []


def test_failed_attempts_are_logged_at_most_once_per_interval_then_the_wait_is_summed_up() -> None:
    wait, _, _ = make()
    attempts = 30  # 0.5 + 1 + 2 + 4 + 26 * 5 seconds of waiting

    with capture_logs() as logs:
        wait.run("topics", failing(attempts))

    waiting = [e for e in logs if e["event"] == BROKER_WAITING]
    assert waiting[0]["attempt"] == 1 and waiting[0]["step"] == "topics"
    assert 1 < len(waiting) <= 2 + (0.5 + 1 + 2 + 4 + 26 * 5) / LOG_EVERY_S
    assert sum(e["attempts_since_last"] for e in waiting) <= attempts
    waited = [e for e in logs if e["event"] == BROKER_WAITED]
    assert [(e["step"], e["attempts"], e["seconds"]) for e in waited] == [
        ("topics", attempts, 137.5)
    ]
