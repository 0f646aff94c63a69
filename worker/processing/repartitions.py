"""Which topics of a built topology are repartition topics, and how many partitions each
needs: pure functions over the topology and the partition counts of the other topics.

A repartition topic is internal: named ``<application.id>-<name>-repartition`` (the DSL
names them so, :mod:`worker.dsl.plan`), written by a sink of one sub-topology and read by a
source of another. It is found from the built topology alone, so the worker needs nothing
beyond the ``Topology`` the DSL compiled.

Its partition count is that of the sub-topology writing it, planned with the other
internal topics (``worker.processing.internal_topics``, applied by
``worker.kafka.topics``).
"""

from __future__ import annotations

from worker.processing.built_topology import BuiltTopology

SUFFIX = "-repartition"


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
