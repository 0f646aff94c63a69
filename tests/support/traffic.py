"""Steady input traffic from a background thread, for tests that act while work flows."""

from __future__ import annotations

import threading
from typing import Protocol


class Producing(Protocol):
    def produce(self, count: int) -> None: ...


class SteadyProducer:
    """Calls ``target.produce(per_tick)`` every ``tick`` seconds until the block ends."""

    def __init__(self, target: Producing, per_tick: int = 100, tick: float = 0.1) -> None:
        self._target, self._per_tick, self._tick = target, per_tick, tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._tick):  # pacing the generator, not a condition wait
                self._target.produce(self._per_tick)
        except BaseException as exc:  # reported when the block ends
            self.error = exc

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
