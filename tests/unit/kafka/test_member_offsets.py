"""Committed offsets read back through the group member: the metadata as it was committed."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.structs import OffsetAndMetadata, TopicPartition

from worker.kafka import group_coordinator, member_offsets
from worker.processing.timestamps import decode_stream_time, encode_stream_time


def test_metadata_written_by_librdkafka_with_a_trailing_nul_reads_back_as_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    note = encode_stream_time(7_000)
    answer = {
        TopicPartition("in", 0): OffsetAndMetadata(2, note + "\x00", -1),  # Kafka, via librdkafka
        TopicPartition("in", 1): OffsetAndMetadata(5, note, -1),  # via kafka-python
        TopicPartition("in", 2): OffsetAndMetadata(9, None, -1),  # dropped (the test broker)
    }

    def fetch(consumer: Any, partitions: Any, timeout_ms: int) -> dict[Any, Any]:
        return answer

    monkeypatch.setattr(group_coordinator, "fetch_committed", fetch)
    found = member_offsets.committed_with_metadata(
        object(),
        [("in", 0), ("in", 1), ("in", 2), ("in", 3)],
        1000,  # type: ignore[arg-type]
    )

    assert found == {
        ("in", 0): (2, note),
        ("in", 1): (5, note),
        ("in", 2): (9, ""),
        ("in", 3): (None, ""),
    }
    assert decode_stream_time(found[("in", 0)][1]) == 7_000
