"""Time as an injected dependency, so logic never calls ``time`` directly and tests can steer it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

# Record timestamps, stream time and window bounds are milliseconds in a signed 64-bit
# integer, as Kafka's are.
MAX_TIME_MS = 2**63 - 1


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


@dataclass
class FakeClock:
    """A clock tests advance by hand."""

    now: float = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
