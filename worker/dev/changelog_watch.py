"""When each record of a changelog reached a reader, per partition: the demo's stall signal.

The example app runs on its payments' event times, so the records of its changelogs carry
event times, not the time of their commit. A ``read_committed`` reader that follows the
changelog while the demo runs sees each commit's records when the commit happened (to
within its poll), so the silences in their arrival times are the tasks' stalls.
"""

from __future__ import annotations

import threading
import time

from worker.config import Settings, load
from worker.kafka.consumers import DataConsumer


class ChangelogWatch:
    """Follows ``topic``'s partitions from their start on a thread of its own; ``arrivals``
    (partition -> wall-clock ms at which each record arrived) is complete after :meth:`stop`.
    """

    def __init__(self, settings: Settings, topic: str, partitions: int) -> None:
        reader = load(
            None,
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "application.id": "worker-demo-watch",
            },
            environ={},
        ).settings
        self._consumer = DataConsumer(reader)  # assigned partitions only: never joins a group
        self._consumer.add({(topic, p): None for p in range(partitions)})
        self.arrivals: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="changelog-watch", daemon=True)

    def start(self) -> ChangelogWatch:
        self._thread.start()
        return self

    def stop(self, linger: float = 1.0) -> None:
        """Read for ``linger`` more seconds (the last commits), then stop and close."""
        time.sleep(linger)
        self._stop.set()
        self._thread.join(timeout=10)

    def _follow(self) -> None:
        try:
            while not self._stop.is_set():
                messages = self._consumer.consume(10000, 0.05)
                now = int(time.time() * 1000)
                for msg in messages:
                    self.arrivals[msg.partition()].append(now)
        finally:
            self._consumer.close()
