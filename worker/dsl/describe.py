"""A compiled topology as text, in the shape of Kafka Streams' ``TopologyDescription``:
one block per sub-topology, each node with its topics or stores and its successors.

    Topologies:
       Sub-topology: 0
        Source: KSTREAM-SOURCE-0000000000 (topics: [payments])
          --> KSTREAM-KEY-SELECT-0000000001
        Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
          --> per-merchant-repartition-filter
          <-- KSTREAM-SOURCE-0000000000
        ...
        Sink: per-merchant-repartition-sink (topic: app-per-merchant-repartition)
          <-- per-merchant-repartition-filter

Works on any ``Topology``; repartition topics are marked as such for a DSL one.
"""

from __future__ import annotations

from worker.dsl.plan import DslTopology
from worker.processing.built_topology import Subtopology
from worker.processing.topology import Topology


def describe(topology: Topology) -> str:
    """The text of ``topology`` (built here; the Topology itself is unchanged)."""
    built = topology.build()
    repartitions = (
        {r.topic for r in topology.repartition_topics}
        if isinstance(topology, DslTopology)
        else set()
    )
    lines = ["Topologies:"]
    for st in built.subtopologies:
        lines.extend(_subtopology(st, repartitions))
    return "\n".join(lines) + "\n"


def _subtopology(st: Subtopology, repartitions: set[str]) -> list[str]:
    parents: dict[str, list[str]] = {}
    for parent, children in st.children.items():
        for child in children:
            parents.setdefault(child, []).append(parent)
    lines = [f"   Sub-topology: {st.id}"]

    def links(name: str) -> list[str]:
        out = []
        children = st.children.get(name, ())
        if children:
            out.append(f"      --> {', '.join(children)}")
        if parents.get(name):
            out.append(f"      <-- {', '.join(parents[name])}")
        return out

    for source in st.sources:
        kind = " (repartition)" if source.topic in repartitions else ""
        table = f" (table store: {source.table_store})" if source.table_store else ""
        lines.append(f"    Source: {source.name} (topics: [{source.topic}]){kind}{table}")
        lines.extend(links(source.name))
    for proc in st.processors:
        lines.append(f"    Processor: {proc.name} (stores: [{', '.join(proc.stores)}])")
        lines.extend(links(proc.name))
    for sink in st.sinks:
        kind = " (repartition)" if sink.topic in repartitions else ""
        lines.append(f"    Sink: {sink.name} (topic: {sink.topic}){kind}")
        lines.extend(links(sink.name))
    return lines
