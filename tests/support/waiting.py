"""Wait on conditions with deadlines; never on bare sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    interval: float = 0.1,
    message: str | Callable[[], str] = "",
) -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``message`` at the deadline.

    ``message`` may be a callable, evaluated only on failure (to describe the last state).
    """
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout}s waiting for {text or condition}")
        time.sleep(interval)
        last = condition()
    return last
