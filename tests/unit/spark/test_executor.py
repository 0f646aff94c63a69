"""The Spark-side functions: rejected rows become markers, writers always report, never raise."""

from __future__ import annotations

import pickle
from typing import Any

from worker.kafka.table_writer import TableWriteFailed, WriteSummary
from worker.partitioner import partition_for
from worker.serde import JSON, STR
from worker.spark.encoding import TableEncoder
from worker.spark.executor import REJECTED, EncodeStats, PartitionWriter, encode_rows, encode_stats

ENCODER = TableEncoder(("k", "v"), "k", "v", STR, JSON, 4)


def test_rows_that_cannot_be_encoded_become_rejected_markers_carrying_the_reason():
    records = list(encode_rows(ENCODER, [("a", 1), (None, 2), ("b", object())]))

    assert records[0] == (partition_for(b"a", 4), b"a", b"1")
    assert records[1] == (REJECTED, b"", b"key column 'k' is null")
    partition, _, reason = records[2]
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


class Sink:
    def __init__(self) -> None:
        self.added: list[WriteSummary] = []

    def add(self, term: WriteSummary) -> None:
        self.added.append(term)


def writer_with(write: Any) -> tuple[PartitionWriter, Sink]:
    sink = Sink()
    return PartitionWriter({"bootstrap.servers": "x"}, "t", 4, 5.0, sink, write), sink


def test_a_successful_write_reports_its_summary():
    seen: list[Any] = []

    def write(config, topic, partitions, records, timeout):
        seen.append((topic, partitions, list(records), timeout))
        return WriteSummary({1: 1})

    writer, sink = writer_with(write)
    writer([(1, b"k", b"v")])

    assert seen == [("t", 4, [(1, b"k", b"v")], 5.0)]
    assert sink.added == [WriteSummary({1: 1})]


def test_a_failed_write_reports_what_was_acknowledged_instead_of_raising():
    partial = WriteSummary({0: 7}, failed=1, errors=("no",))

    def write(*_args):
        raise TableWriteFailed("t", partial)

    writer, sink = writer_with(write)
    writer([])

    assert sink.added == [partial]


def test_an_unexpected_error_is_reported_as_a_failure_with_nothing_acknowledged():
    def write(*_args):
        raise RuntimeError("librdkafka config broken")

    writer, sink = writer_with(write)
    writer([])

    (summary,) = sink.added
    assert not summary.ok and summary.total_acked == 0
    assert "RuntimeError: librdkafka config broken" in summary.errors[0]


def test_the_partition_writer_pickles():
    writer = PartitionWriter({"a": 1}, "t", 4, 5.0, Sink())

    assert pickle.loads(pickle.dumps(writer)).topic == "t"
