"""A test driver that holds every record written to a topic the topology reads until the
test delivers it: the interleavings a broker may produce, chosen by the test.

``TopologyTestDriver`` processes each record, and everything it causes, before ``pipe``
returns: one interleaving of its tasks. On a broker, partitions are read independently,
so records of different partitions (input topics, repartition topics, the foreign-key
join's subscription and response topics) reach their tasks in any order, while one
partition's records keep theirs. :meth:`InterleavingDriver.deliver` processes the oldest
held record of the partition the test picks, so a property test can try them all.
"""

from __future__ import annotations

from worker.testing import TopologyTestDriver
from worker.testing.logs import LogRecord


class InterleavingDriver(TopologyTestDriver):
    """``TopologyTestDriver`` whose records wait until :meth:`deliver` or :meth:`drain`."""

    def _drain(self) -> None:
        """Hold: nothing is processed until the test delivers it."""

    def held(self) -> list[tuple[str, int]]:
        """The partitions holding records, in the order their oldest record was written."""
        seen: dict[tuple[str, int], None] = {}
        for record in self._queue:
            seen.setdefault((record.topic(), record.partition()), None)
        return list(seen)

    def deliver(self, choice: int) -> LogRecord | None:
        """Process the oldest held record of partition ``held()[choice % len(held())]``
        (then commit and punctuate, as the driver does after each record); returns it, or
        None when nothing is held."""
        partitions = self.held()
        if not partitions:
            return None
        picked = partitions[choice % len(partitions)]
        record = next(r for r in self._queue if (r.topic(), r.partition()) == picked)
        self._queue.remove(record)
        self._process(record)
        return record

    def drain(self) -> None:
        """Process every held record, and what it causes, in the order written."""
        while self._queue:
            self._process(self._queue.popleft())
