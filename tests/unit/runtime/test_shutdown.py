"""ShutdownWatchdog: exit non-zero when a requested stop takes longer than shutdown.timeout.ms."""

from __future__ import annotations

import threading
import time

from structlog.testing import capture_logs

from worker.config import load
from worker.runtime.shutdown import EXIT_SHUTDOWN_TIMEOUT, ShutdownWatchdog


class ExitRecorder:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def test_a_stop_that_overruns_the_timeout_exits_with_code_1_and_says_why() -> None:
    stop, exit_ = threading.Event(), ExitRecorder()
    watchdog = ShutdownWatchdog(stop, 0.2, exit=exit_)
    with capture_logs() as logs:
        watchdog.start()
        stop.set()
        started = time.monotonic()
        assert exit_.called.wait(5)
    assert exit_.codes == [EXIT_SHUTDOWN_TIMEOUT] == [1]
    assert 0.15 <= time.monotonic() - started < 2.0
    assert [e["event"] for e in logs] == ["worker.shutdown_timeout"]
    assert logs[0]["timeout_ms"] == 200


def test_a_stop_that_finishes_in_time_never_exits() -> None:
    stop, exit_ = threading.Event(), ExitRecorder()
    watchdog = ShutdownWatchdog(stop, 0.3, exit=exit_)
    watchdog.start()
    stop.set()
    watchdog.finish()
    watchdog.join(2)
    assert not exit_.called.wait(0.5)


def test_no_stop_requested_means_no_deadline() -> None:
    stop, exit_ = threading.Event(), ExitRecorder()
    watchdog = ShutdownWatchdog(stop, 0.05, exit=exit_)
    watchdog.start()
    assert not exit_.called.wait(0.3)
    watchdog.finish()  # the worker ended without a stop (an error): the watchdog stands down
    watchdog.join(3)
    stop.set()
    assert not exit_.called.wait(0.3)


def test_the_deadline_counts_from_the_stop_request_not_from_start() -> None:
    stop, exit_ = threading.Event(), ExitRecorder()
    watchdog = ShutdownWatchdog(stop, 0.3, exit=exit_)
    watchdog.start()
    time.sleep(0.5)  # running normally for longer than the timeout
    assert not exit_.called.is_set()
    stop.set()
    assert not exit_.called.wait(0.1)
    assert exit_.called.wait(5)


def test_shutdown_timeout_is_a_setting_defaulting_to_30_seconds() -> None:
    assert load(None, {}, environ={}).settings.shutdown_timeout_ms == 30000
    settings = load(None, {"shutdown.timeout.ms": "5000"}, environ={}).settings
    assert settings.shutdown_timeout_ms == 5000
