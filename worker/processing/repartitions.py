"""Which topics of a built topology are repartition topics, and how many partitions each
needs: pure functions over the topology and the partition counts of the other topics.

A repartition topic is internal: named ``<application.id>-<name>-repartition`` (the DSL
names them so, :mod:`worker.dsl.plan`), written by a sink of one sub-topology and read by a
source of another. It is found from the built topology alone, so the worker needs nothing
beyond the ``Topology`` the DSL compiled.

Its partition count is that of the sub-topology writing it: the count of that
sub-topology's sources, which may themselves be repartition topics sized the same way,
resolved until nothing changes (Kafka Streams' ``RepartitionTopics``).
"""

from __future__ import annotations

from collections.abc import Mapping

from worker.errors import TopologyError
from worker.processing.topology import BuiltTopology

SUFFIX = "-repartition"
# Kafka Streams' RepartitionTopicConfig: delete policy, kept until purged (DeleteRecords
# below the committed offsets), never expired by time under a slow consumer.
CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1"}


def is_repartition_topic(topic: str, application_id: str) -> bool:
    return topic.startswith(f"{application_id}-") and topic.endswith(SUFFIX)


def repartition_writers(topology: BuiltTopology, application_id: str) -> dict[str, int]:
    """Each repartition topic -> the sub-topology writing it (those read and written
    inside the topology, with a repartition topic's name)."""
    read = {t for st in topology.subtopologies for t in st.source_topics}
    return {
        sink.topic: st.id
        for st in topology.subtopologies
        for sink in st.sinks
        if sink.topic in read and is_repartition_topic(sink.topic, application_id)
    }


def repartition_partitions(
    topology: BuiltTopology, application_id: str, counts: Mapping[str, int]
) -> dict[str, int]:
    """Each repartition topic's partition count, from ``counts`` (the other topics').

    Raises:
        TopologyError: a count cannot be resolved (a writer reads a topic missing from
            ``counts`` that is no repartition topic).
    """
    writers = repartition_writers(topology, application_id)
    sources = {st.id: st.source_topics for st in topology.subtopologies}
    sized = {t: n for t, n in counts.items() if t not in writers}
    pending = dict(writers)
    while pending:
        resolved = {
            topic: max(sized[t] for t in sources[writer])
            for topic, writer in pending.items()
            if all(t in sized for t in sources[writer])
        }
        if not resolved:
            raise TopologyError(
                f"cannot size repartition topics {sorted(pending)}: the sub-topologies writing"
                " them read topics whose partition counts are unknown"
            )
        sized.update(resolved)
        for topic in resolved:
            del pending[topic]
    return {topic: sized[topic] for topic in writers}
