"""Start-up steps that need the broker, retried with backoff until they succeed or the
worker is stopped.

A worker started while its broker is down (a cluster restarting with it, a node that
boots first) waits for it instead of exiting: under a supervisor an exit turns into a
crash-loop back-off (minutes under Kubernetes) that outlives the outage. Kafka Streams
behaves the same way (its system test ``streams_broker_down_resilience`` starts with the
broker down). Meanwhile the process is alive (``/healthz`` 200: every wait beats the
worker's heart) and not ready (``/readyz`` 503: it is still starting), and a stop
request ends the wait at once, with exit code 0.

Only :class:`~worker.errors.KafkaUnavailable` is retried. Anything else a step raises
(a missing topic, a bad setting) is not cured by waiting and ends the start-up as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from worker.clock import Clock
from worker.errors import KafkaUnavailable, WorkerError
from worker.events import BROKER_WAITED, BROKER_WAITING
from worker.observability import get_logger

T = TypeVar("T")

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 5.0
# A failed attempt is logged at once the first time, then at most this often (with the
# number of attempts since the last line), so a long outage does not flood the log.
LOG_EVERY_S = 15.0


class StartupStopped(WorkerError):
    """A stop was requested while the worker waited for its broker: exit cleanly (0)."""


def retry_delay(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): doubling, capped."""
    return float(min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (attempt - 1)))


class BrokerWait:
    """Runs start-up steps until the broker answers. Processing thread only.

    ``beat`` is called after every attempt (the worker publishes its status, so liveness
    stays fresh while it waits); ``stop`` is the worker's stop event.
    """

    def __init__(
        self, stop: threading.Event, clock: Clock, beat: Callable[[], None], bootstrap: str
    ) -> None:
        self._stop = stop
        self._clock = clock
        self._beat = beat
        self._bootstrap = bootstrap
        self._log = get_logger(component="startup")

    def run(self, step: str, attempt: Callable[[], T]) -> T:
        """``attempt()``'s result once it does not raise KafkaUnavailable.

        Raises StartupStopped when the worker is stopped before that, and whatever else
        ``attempt`` raises.
        """
        started = self._clock.monotonic()
        attempts = 0
        logged_at: float | None = None
        unlogged = 0
        while True:
            if self._stop.is_set():
                raise StartupStopped(f"stopped while waiting for the broker ({step})")
            try:
                result = attempt()
            except KafkaUnavailable as exc:
                attempts += 1
                unlogged += 1
                delay = retry_delay(attempts)
                now = self._clock.monotonic()
                if logged_at is None or now - logged_at >= LOG_EVERY_S:
                    self._log.warning(
                        BROKER_WAITING,
                        step=step,
                        attempt=attempts,
                        attempts_since_last=unlogged,
                        retry_in_s=delay,
                        bootstrap=self._bootstrap,
                        error=str(exc),
                    )
                    logged_at, unlogged = now, 0
                self._beat()
                if self._stop.wait(delay):
                    raise StartupStopped(f"stopped while waiting for the broker ({step})") from exc
                continue
            if attempts:
                waited = round(self._clock.monotonic() - started, 3)
                self._log.info(BROKER_WAITED, step=step, attempts=attempts, seconds=waited)
            self._beat()
            return result
