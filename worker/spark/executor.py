"""What runs inside Spark's Python workers to encode one partition of rows.

No pyspark import: these functions get plain iterators and picklable arguments, so they
run (and are tested) without Spark. The driver (``worker.spark.load``) wires them into
``mapPartitions``; the writing is the ``worker`` data source's (``worker.spark.datasource``).

A rejected row does not fail the Spark task: it is encoded as a marker record (partition
:data:`REJECTED`, the reason in the value slot) so the driver can report the first few
reasons and refuse the load before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

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
            yield REJECTED, b"", str(exc).encode(), None


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
    for partition, _key, value, _timestamp in records:
        stats.rows += 1
        if partition == REJECTED:
            stats.rejected += 1
            if len(stats.reasons) < _MAX_REASONS and value is not None:
                stats.reasons.append(value.decode(errors="replace"))
        else:
            counts[partition] = counts.get(partition, 0) + 1
    yield stats
