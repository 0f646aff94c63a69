"""What a test pipes records into and reads results from (Kafka Streams'
``TestInputTopic`` and ``TestOutputTopic``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.errors import WorkerError
from worker.serde import Codec, Serde
from worker.testing.logs import Headers, LogRecord


class NoRecords(WorkerError):
    """A test read one record from an output topic that has none left."""


@dataclass(frozen=True, slots=True)
class TestRecord:
    """An output record, decoded: ``value`` None is a tombstone."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int
    headers: Headers = None


class TestInputTopic:
    """Pipes records into one topic of the driver; each is processed, with everything it
    causes (repartition hops included), before ``pipe`` returns."""

    __test__ = False

    def __init__(
        self,
        name: str,
        key_serde: Serde,
        value_serde: Serde,
        pipe: Callable[[str, bytes | None, bytes | None, int, Headers], None],
        clock_ms: Callable[[], int],
    ) -> None:
        self.name = name
        self._keys, self._values = Codec(key_serde), Codec(value_serde)
        self._pipe = pipe
        self._clock_ms = clock_ms

    def pipe(
        self,
        key: Any,
        value: Any,
        *,
        timestamp: int | None = None,
        headers: Headers = None,
    ) -> None:
        """One record; ``timestamp`` (ms) defaults to the driver's wall clock."""
        ts = self._clock_ms() if timestamp is None else timestamp
        self._pipe(self.name, self._keys.encode(key), self._values.encode(value), ts, headers)

    def pipe_many(self, records: list[tuple[Any, Any, int]]) -> None:
        """``(key, value, timestamp)`` records, in order."""
        for key, value, timestamp in records:
            self.pipe(key, value, timestamp=timestamp)


class TestOutputTopic:
    """Reads what the topology wrote to one topic, each record once (a read consumes)."""

    __test__ = False

    def __init__(self, name: str, key_serde: Serde, value_serde: Serde, log: list[LogRecord]):
        self.name = name
        self._keys, self._values = Codec(key_serde), Codec(value_serde)
        self._log = log
        self._position = 0

    def read_records(self) -> list[TestRecord]:
        """Every record not read yet, in the order written."""
        new = self._log[self._position :]
        self._position = len(self._log)
        return [self._decode(r) for r in new]

    def read_record(self) -> TestRecord:
        """The next record. Raises NoRecords when there is none."""
        if self._position >= len(self._log):
            raise NoRecords(f"output topic {self.name!r} has no record left to read")
        record = self._log[self._position]
        self._position += 1
        return self._decode(record)

    def read_key_values(self) -> list[tuple[Any, Any]]:
        """``(key, value)`` of every record not read yet."""
        return [(r.key, r.value) for r in self.read_records()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """The last value per key of the records not read yet (tombstones kept as None)."""
        return dict(self.read_key_values())

    def is_empty(self) -> bool:
        return self._position >= len(self._log)

    def _decode(self, record: LogRecord) -> TestRecord:
        return TestRecord(
            self._keys.decode(record.key()),
            self._values.decode(record.value()),
            record.timestamp()[1],
            record.headers(),
        )
