"""murmur2 and key -> partition, checked against the vectors published with Kafka's clients."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.partitioner import murmur2, partition_for

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS, ids=lambda v: repr(v))
def test_murmur2_matches_kafkas_published_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS, ids=lambda v: repr(v))
def test_partition_is_the_positive_hash_modulo_the_partition_count(
    key: bytes, expected: int
) -> None:
    for partitions in (1, 3, 7, 12, 100):
        assert partition_for(key, partitions) == (expected & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize("partitions", [0, -1])
def test_a_non_positive_partition_count_is_rejected(partitions: int) -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for(b"key", partitions)


@given(key=st.binary(max_size=64), partitions=st.integers(min_value=1, max_value=1000))
def test_every_key_lands_on_an_existing_partition(key: bytes, partitions: int) -> None:
    assert 0 <= partition_for(key, partitions) < partitions


@given(key=st.binary(max_size=64))
def test_murmur2_is_a_signed_32_bit_int(key: bytes) -> None:
    assert -(2**31) <= murmur2(key) < 2**31
