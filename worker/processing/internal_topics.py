"""The internal topics a topology needs, decided by a pure function.

:func:`plan_internal_topics` takes the built topology, the application id and the
partition counts of the topics it reads, and returns a :class:`TopicPlan`: how many tasks
each sub-topology runs, and every internal topic with its name, partition count, configs
and the reason it exists (:class:`TopicRole`). It talks to no broker: the admin step
(``worker.kafka.topics.prepare_topics``) looks the counts up, calls it, then creates what
is missing and reports what does not match. Deciding apart from doing (style habit 3)
leaves one place to add a topic kind: a repartition topic (the DSL's, issue 30) is a
:class:`Repartition` in, an :class:`InternalTopic` of role ``REPARTITION`` out.

Partition counts: a sub-topology runs one task per partition of its source topics, which
must all have the same count (co-partitioned); its changelogs get that count. A
repartition topic takes the count of the topic named in its ``partitions_from`` (an
upstream source topic, another repartition topic, or, for a foreign-key join's
subscription and response topics, the table topic of the sub-topology reading it), and
a sub-topology reading it runs as many tasks.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from worker.errors import TopologyError
from worker.processing.topology import BuiltTopology, StoreSpec

# Kafka Streams' windowstore.changelog.additional.retention.ms: a windowed changelog keeps
# records this much longer than the store does ("clock drift").
WINDOW_CHANGELOG_MARGIN_MS = 24 * 3600 * 1000
# Set explicitly: some brokers describe back only the configs given at creation.
CHANGELOG_CONFIG: Mapping[str, str] = {"cleanup.policy": "compact"}
DLQ_CONFIG: Mapping[str, str] = {"cleanup.policy": "delete"}
# Kafka Streams' RepartitionTopicConfig: delete policy, kept until purged (DeleteRecords
# below the committed offsets, worker/kafka/repartition_purge.py), never expired by time
# under a slow reader.
REPARTITION_CONFIG: Mapping[str, str] = {"cleanup.policy": "delete", "retention.ms": "-1"}


class TopicRole(enum.Enum):
    """Why an internal topic exists."""

    CHANGELOG = "changelog"  # a store's history, restored from after a move or crash
    TABLE = "table"  # a table's own topic: its source and its changelog, never created here
    DEAD_LETTER = "dead-letter"  # records the exception handlers skipped
    REPARTITION = "repartition"  # re-keyed records between two sub-topologies (the DSL)


@dataclass(frozen=True, slots=True)
class Repartition:
    """A repartition topic a topology writes and reads back: ``topic`` takes the partition
    count of ``partitions_from`` (a source topic upstream of it, or another repartition
    topic)."""

    topic: str
    partitions_from: str


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """One internal topic as it should be.

    ``partitions``: its count when created; when ``co_partitioned`` an existing topic must
    have exactly that many (its partitions are its sub-topology's tasks), otherwise any
    count serves. ``config``: what it is created with (a table's topic is the user's and
    is never created: none). ``subtopology`` and ``store``: whose topic it is, where that
    applies."""

    name: str
    role: TopicRole
    partitions: int
    config: Mapping[str, str]
    co_partitioned: bool
    subtopology: int | None = None
    store: str | None = None

    @property
    def created_here(self) -> bool:
        """Whether the worker may create it (``internal.topics.create``)."""
        return self.role is not TopicRole.TABLE


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """``tasks``: sub-topology id -> its number of tasks (= partitions of its sources);
    ``topics``: every internal topic, ordered by name."""

    tasks: Mapping[int, int]
    topics: tuple[InternalTopic, ...]

    def topic(self, name: str) -> InternalTopic:
        """The planned topic ``name``. Raises KeyError when the plan has none."""
        for topic in self.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)


def changelog_config(
    spec: StoreSpec, margin_ms: int = WINDOW_CHANGELOG_MARGIN_MS
) -> Mapping[str, str]:
    """The configs a store's changelog is created with. A windowed store's is
    ``compact,delete`` with ``retention.ms`` = the store's retention + ``margin_ms``: its
    expiry writes no tombstones, so the broker drops old windows by time (both set
    explicitly: some brokers describe back only the configs given at creation)."""
    if spec.windows is None:
        return CHANGELOG_CONFIG
    retention = spec.windows.retention_ms + margin_ms
    return {"cleanup.policy": "compact,delete", "retention.ms": str(retention)}


def dlq_topic(application_id: str) -> str:
    """The dead-letter topic of an application: records the exception handlers skipped."""
    return f"{application_id}-dlq"


def plan_internal_topics(
    topology: BuiltTopology,
    application_id: str,
    source_partitions: Mapping[str, int],
    *,
    repartitions: Sequence[Repartition] = (),
    dead_letter: bool = False,
    window_margin_ms: int = WINDOW_CHANGELOG_MARGIN_MS,
) -> TopicPlan:
    """The tasks and internal topics of ``topology``.

    ``source_partitions``: the partition count of every topic the topology reads that is
    not a repartition topic (more is ignored). ``dead_letter``: an exception handler is set
    to ``dead_letter``; its topic gets as many partitions as the largest sub-topology has
    tasks. Pure: the same arguments give the same plan.

    Raises:
        TopologyError: the sources of one sub-topology are not co-partitioned, or a
            repartition topic's count cannot be resolved (unknown topic, or a cycle).
        KeyError: a source topic missing from ``source_partitions`` (the caller checks
            that its sources exist first).
    """
    counts = _resolve(source_partitions, repartitions)
    tasks: dict[int, int] = {}
    topics: list[InternalTopic] = []
    for st in topology.subtopologies:
        sizes = {topic: counts[topic] for topic in st.source_topics}
        if len(set(sizes.values())) != 1:
            detail = ", ".join(f"{t}={n}" for t, n in sorted(sizes.items()))
            raise TopologyError(
                f"sub-topology {st.id} reads topics that are not co-partitioned: {detail}"
            )
        tasks[st.id] = n = next(iter(sizes.values()))
        for spec in st.stores:
            role, config = (
                (TopicRole.TABLE, {})
                if spec.is_table
                else (TopicRole.CHANGELOG, changelog_config(spec, window_margin_ms))
            )
            name = spec.changelog(application_id)
            topics.append(InternalTopic(name, role, n, config, True, st.id, spec.name))
    for rep in repartitions:
        writer = next(
            (st.id for st in topology.subtopologies if any(s.topic == rep.topic for s in st.sinks)),
            None,
        )
        topics.append(
            InternalTopic(
                rep.topic,
                TopicRole.REPARTITION,
                counts[rep.topic],
                REPARTITION_CONFIG,
                True,
                writer,
            )
        )
    if dead_letter:
        size = max(tasks.values())
        topics.append(
            InternalTopic(dlq_topic(application_id), TopicRole.DEAD_LETTER, size, DLQ_CONFIG, False)
        )
    return TopicPlan(tasks, tuple(sorted(topics, key=lambda t: t.name)))


def _resolve(
    source_partitions: Mapping[str, int], repartitions: Sequence[Repartition]
) -> Mapping[str, int]:
    """``source_partitions`` with each repartition topic's count added."""
    counts = dict(source_partitions)
    pending = {rep.topic: rep.partitions_from for rep in repartitions}
    for topic in pending:
        chain = [topic]
        while chain[-1] in pending and chain[-1] not in counts:
            upstream = pending[chain[-1]]
            if upstream in chain:
                raise TopologyError(f"repartition topics take their partitions in a cycle: {chain}")
            chain.append(upstream)
        if chain[-1] not in counts:
            raise TopologyError(
                f"repartition topic {topic}: no partition count for {chain[-1]} to take"
            )
        for name in chain:
            counts[name] = counts[chain[-1]]
    return counts
