"""librdkafka's lines become structured events, a repeating line once per window."""

from __future__ import annotations

import logging

import pytest
import structlog
from structlog.testing import capture_logs

from worker.events import LIBRDKAFKA_LOG
from worker.kafka.client_logs import LibrdkafkaHandler, librdkafka_logger

REFUSED = (
    "FAIL [rdkafka#consumer-3] [thrd:127.0.0.1:{port}/bootstrap]: 127.0.0.1:{port}/bootstrap:"
    " Connect to ipv4#127.0.0.1:{port} failed: Connection refused (after {ms}ms in state CONNECT)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(text: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("librdkafka", level, __file__, 1, text, None, None)


@pytest.fixture(autouse=True)
def _fresh_structlog():
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def test_a_line_becomes_an_event_with_the_client_facility_and_level() -> None:
    handler = LibrdkafkaHandler("consumer", clock=Clock())
    with capture_logs() as logs:
        handler.emit(_record(REFUSED.format(port=4321, ms=0)))
    assert logs == [
        {
            "event": LIBRDKAFKA_LOG,
            "log_level": "error",
            "component": "librdkafka",
            "client": "consumer",
            "facility": "FAIL",
            "message": REFUSED.format(port=4321, ms=0).partition(" ")[2],
            "repeated": 0,
        }
    ]


def test_a_repeating_line_is_logged_once_per_window_with_the_count_of_repeats() -> None:
    clock = Clock()
    handler = LibrdkafkaHandler("consumer", window=30.0, clock=clock)
    with capture_logs() as logs:
        for ms in range(5):  # only the milliseconds differ: the same line
            handler.emit(_record(REFUSED.format(port=4321, ms=ms)))
            clock.now += 1.0
        clock.now += 30.0
        handler.emit(_record(REFUSED.format(port=4321, ms=9)))
    assert [e["repeated"] for e in logs] == [0, 4]


def test_different_lines_are_not_merged() -> None:
    handler = LibrdkafkaHandler("producer", clock=Clock())
    with capture_logs() as logs:
        handler.emit(_record(REFUSED.format(port=1, ms=0)))
        handler.emit(_record("REQTMOUT [rdkafka#producer-1] [thrd:x]: Timed out", logging.WARNING))
    assert [(e["facility"], e["log_level"]) for e in logs] == [
        ("FAIL", "error"),
        ("REQTMOUT", "warning"),
    ]


def test_each_client_name_gets_one_logger_with_one_handler() -> None:
    first = librdkafka_logger("test-client-logs")
    again = librdkafka_logger("test-client-logs")
    assert first is again
    assert sum(isinstance(h, LibrdkafkaHandler) for h in first.handlers) == 1
    assert not first.propagate
