"""The target topic of a load: does it exist, and has it the partition count the job expects?

A table's partition count decides which task owns each key (murmur2 modulo the count).
If the topic the job writes has another count than the topics the table is joined with,
the worker refuses to start (not co-partitioned); if the job computed partitions for
another count than the topic has, keys land on tasks that never look for them. Both are
checked here, on the driver, before a single row is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from worker.kafka.admin import TopicSpec
from worker.spark.errors import LoadRejected

# Table topics are compacted: the latest record per key is the table.
TABLE_TOPIC_CONFIG = {"cleanup.policy": "compact"}


class TopicAdmin(Protocol):
    """The part of ``worker.kafka.admin.Admin`` the checks use."""

    def partition_counts(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, int]: ...

    def create_topics(self, specs: Sequence[TopicSpec], timeout: float = 30.0) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Target:
    """The checked target: its partition count, why that count, and whether it exists yet."""

    topic: str
    partitions: int
    reason: str
    exists: bool = True


def expected_partitions(
    counts: Mapping[str, int], partitions: int | None, co_partition_with: Sequence[str]
) -> tuple[int | None, str]:
    """The partition count the job expects, and why; (None, "") when nothing says.

    Raises LoadRejected when a co-partitioned topic is missing, when they disagree with
    each other, or when one disagrees with ``partitions``.
    """
    if partitions is not None and partitions <= 0:
        raise LoadRejected(f"--partitions must be positive, got {partitions}")
    missing = [t for t in co_partition_with if t not in counts]
    if missing:
        raise LoadRejected(
            f"topic {missing[0]!r} does not exist, so co-partitioning with it cannot be checked"
        )
    found = {t: counts[t] for t in co_partition_with}
    if len(set(found.values())) > 1:
        listing = ", ".join(f"{t}={n}" for t, n in found.items())
        raise LoadRejected(f"the topics to co-partition with disagree: {listing}")
    if found:
        count = next(iter(found.values()))
        why = f"co-partitioned with {', '.join(found)} ({count})"
        if partitions is not None and partitions != count:
            raise LoadRejected(f"--partitions {partitions} contradicts {why}")
        return count, why
    if partitions is not None:
        return partitions, f"--partitions {partitions}"
    return None, ""


def check_target(
    admin: TopicAdmin,
    topic: str,
    *,
    partitions: int | None = None,
    co_partition_with: Sequence[str] = (),
    create: bool = False,
) -> Target:
    """Check the target topic; changes nothing (a missing one is created by :func:`create`).

    Raises LoadRejected: a co-partitioned topic missing or of another count, the target
    missing (without ``create``, or without a count to create it with), or the target
    having another partition count than expected.
    """
    counts = admin.partition_counts([topic, *co_partition_with])
    expected, why = expected_partitions(counts, partitions, co_partition_with)
    actual = counts.get(topic)
    if actual is None:
        if not create:
            raise LoadRejected(
                f"topic {topic!r} does not exist; create it (compacted) or pass --create"
            )
        if expected is None:
            raise LoadRejected(
                f"topic {topic!r} does not exist: give --partitions or --co-partition-with"
                " to create it with the right partition count"
            )
        return Target(topic, expected, why, exists=False)
    if expected is not None and actual != expected:
        raise LoadRejected(
            f"topic {topic!r} has {actual} partitions but the job expects {expected} ({why}):"
            " keys would be written to partitions whose tasks never look for them"
        )
    return Target(topic, actual, why or f"the topic's own count ({actual})")


def create(admin: TopicAdmin, target: Target) -> Target:
    """Create a target that does not exist yet: compacted, with the checked count.

    Raises LoadRejected if the topic appeared meanwhile with another partition count.
    """
    if target.exists:
        return target
    admin.create_topics([TopicSpec(target.topic, target.partitions, TABLE_TOPIC_CONFIG)])
    actual = admin.partition_counts([target.topic]).get(target.topic)
    if actual is not None and actual != target.partitions:
        raise LoadRejected(
            f"topic {target.topic!r} was created meanwhile with {actual} partitions,"
            f" not {target.partitions}"
        )
    return Target(target.topic, target.partitions, target.reason, exists=True)
