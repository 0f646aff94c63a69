"""The Spark-side encoding: rejected rows become markers carrying the reason."""

from __future__ import annotations

from worker.partitioner import partition_for
from worker.serde import JSON, STR
from worker.spark.encoding import TableEncoder
from worker.spark.executor import REJECTED, EncodeStats, encode_rows, encode_stats

ENCODER = TableEncoder(("k", "v"), "k", "v", STR, JSON, 4)


def test_rows_that_cannot_be_encoded_become_rejected_markers_carrying_the_reason():
    records = list(encode_rows(ENCODER, [("a", 1), (None, 2), ("b", object())]))

    assert records[0] == (partition_for(b"a", 4), b"a", b"1", None)
    assert records[1] == (REJECTED, b"", b"key column 'k' is null", None)
    partition, _, reason, _ = records[2]
    assert partition == REJECTED and reason is not None and b"value of key 'b'" in reason


def test_stats_count_rows_per_partition_and_keep_the_first_reasons():
    records = list(encode_rows(ENCODER, [("a", 1), ("b", 2), *[(None, i) for i in range(9)]]))

    (stats,) = encode_stats(records)

    assert stats.rows == 11 and stats.rejected == 9
    assert sum(stats.per_partition.values()) == 2
    assert len(stats.reasons) == 5


def test_stats_of_partitions_merge():
    merged = EncodeStats(2, {0: 2}) + EncodeStats(3, {0: 1, 1: 1}, 1, ["bad"])

    assert merged == EncodeStats(5, {0: 3, 1: 1}, 1, ["bad"])
