"""librdkafka's log lines as structured events, each repeated line logged once per window.

Without a logger librdkafka prints ``%3|1795263705.929|FAIL|...`` lines straight to
stderr, between the worker's JSON lines, and while the broker is away it prints every
failed connection attempt of every client, several a second. Each client is given a
stdlib logger (confluent-kafka's ``logger`` setting; the lines are then handed over in
the client's own ``poll``/``consume``/``flush`` calls) whose handler turns a line into a
``librdkafka.log`` event with the client's name bound. A line that repeats within
``window`` seconds (the same text once numbers are ignored: ports, milliseconds) is
counted instead of logged, and the count comes with its next appearance as ``repeated``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from worker.events import LIBRDKAFKA_LOG
from worker.observability import get_logger

WINDOW_S = 30.0
_MAX_LINES = 1024  # distinct lines remembered; beyond that the memory is cleared
_NUMBERS = re.compile(r"\d+")
_LEVELS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}


class LibrdkafkaHandler(logging.Handler):
    """Forwards librdkafka's lines to structlog, one per distinct line per window."""

    def __init__(
        self, client: str, window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._log = get_logger(component="librdkafka", client=client)
        self._window = window
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}  # line shape -> (logged at, repeats)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        facility, _, message = text.partition(" ")
        shape = _NUMBERS.sub("#", text)
        now = self._clock()
        logged_at, repeats = self._seen.get(shape, (None, 0))
        if logged_at is not None and now - logged_at < self._window:
            self._seen[shape] = (logged_at, repeats + 1)
            return
        if len(self._seen) >= _MAX_LINES:
            self._seen.clear()
        self._seen[shape] = (now, 0)
        level = _LEVELS.get(record.levelno, "info")
        getattr(self._log, level)(
            LIBRDKAFKA_LOG, facility=facility, message=message, repeated=repeats
        )


def librdkafka_logger(client: str) -> logging.Logger:
    """The logger to give the client named ``client`` (one per name, reused)."""
    logger = logging.getLogger(f"worker.librdkafka.{client}")
    if not any(isinstance(h, LibrdkafkaHandler) for h in logger.handlers):
        logger.addHandler(LibrdkafkaHandler(client))
        logger.setLevel(logging.DEBUG)  # librdkafka's own log_level decides what is sent
        logger.propagate = False
    return logger
