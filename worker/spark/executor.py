"""What runs inside Spark's Python workers: encode one partition of rows, write one partition.

No pyspark import: these functions get plain iterators and picklable arguments, so they
run (and are tested) without Spark. The driver (``worker.spark.load``) wires them into
``mapPartitions`` / ``foreachPartition``.

A rejected row does not fail the Spark task: it is encoded as a marker record (partition
:data:`REJECTED`, the reason in the value slot) so the driver can report the first few
reasons and refuse the load before anything is written. A failed write does not fail
the Spark task either: the writer's summary, with exactly what was acknowledged, goes to
an accumulator and the driver decides. (A Spark task that raised would lose its counts,
and Spark would retry it behind the driver's back.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.kafka.table_writer import TableWriteFailed, WriteSummary, write_table
from worker.spark.encoding import Encoded, RowRejected, TableEncoder

REJECTED = -1  # partition of a marker record for a row that cannot be encoded
_MAX_REASONS = 5


def encode_rows(encoder: TableEncoder, rows: Iterable[Any]) -> Iterator[Encoded]:
    """Encode each row; a row that cannot be encoded becomes a REJECTED marker record."""
    encode = encoder.encode
    for row in rows:
        try:
            yield encode(row)
        except RowRejected as exc:
            yield REJECTED, b"", str(exc).encode()


@dataclass(slots=True)
class EncodeStats:
    """Counts of one or more encoded partitions (merge with ``+``)."""

    rows: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def __add__(self, other: EncodeStats) -> EncodeStats:
        per_partition = dict(self.per_partition)
        for partition, count in other.per_partition.items():
            per_partition[partition] = per_partition.get(partition, 0) + count
        return EncodeStats(
            self.rows + other.rows,
            per_partition,
            self.rejected + other.rejected,
            (self.reasons + other.reasons)[:_MAX_REASONS],
        )


def encode_stats(records: Iterable[Encoded]) -> Iterator[EncodeStats]:
    """One EncodeStats for a partition of encoded records (for ``mapPartitions``)."""
    stats = EncodeStats()
    counts = stats.per_partition
    for partition, _key, value in records:
        stats.rows += 1
        if partition == REJECTED:
            stats.rejected += 1
            if len(stats.reasons) < _MAX_REASONS and value is not None:
                stats.reasons.append(value.decode(errors="replace"))
        else:
            counts[partition] = counts.get(partition, 0) + 1
    yield stats


class SummarySink(Protocol):
    """Where a Spark task reports its writer's summary (a Spark accumulator)."""

    def add(self, term: WriteSummary) -> None: ...


@dataclass(frozen=True, slots=True)
class PartitionWriter:
    """Writes one Spark partition of encoded records; the ``foreachPartition`` function.

    Every outcome, failures included, is reported to ``sink`` as a WriteSummary; nothing
    raises out of it, so Spark neither loses the counts nor retries the write on its own.
    """

    config: Mapping[str, Any]
    topic: str
    num_partitions: int
    timeout: float
    sink: SummarySink
    write: Callable[..., WriteSummary] = write_table  # replaceable in tests

    def __call__(self, records: Iterable[Encoded]) -> None:
        try:
            summary = self.write(
                self.config, self.topic, self.num_partitions, records, self.timeout
            )
        except TableWriteFailed as exc:
            summary = exc.summary
        except Exception as exc:  # report, do not raise: see the class docstring
            summary = WriteSummary(errors=(f"writer failed: {type(exc).__name__}: {exc}",))
        self.sink.add(summary)
