"""The logical graph a :class:`~worker.dsl.StreamsBuilder` records, and its compilation.

Every DSL call appends a :class:`PlanStep` (a name and how it writes itself into a
``Topology``); nothing touches a ``Topology`` until ``build()``, which runs the steps in
the order they were made (parents always come first) against a fresh one. That one pass
is where the application id becomes known, so the repartition topics
(``<application.id>-<name>-repartition``) are named there.

A repartition compiles to sink -> topic -> source (plus a filter that drops None keys in
front of the sink): the source has no parent in the graph, so ``Topology.build()`` puts
the reading side in a sub-topology of its own, as Kafka Streams does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from worker.errors import TopologyError
from worker.processing.topology import Topology


@dataclass(frozen=True, slots=True)
class RepartitionTopic:
    """A repartition topic of a compiled topology: ``name`` as the user gave it or as it
    was generated, ``topic`` the full topic name; partitioned like the sub-topology that
    writes it (the one reading ``upstream``, the topic's writer node)."""

    name: str
    topic: str
    writer: str  # the sink node that writes it


@dataclass(frozen=True, slots=True)
class Compilation:
    """What a step writes into: the topology, the application id, the repartition topics."""

    topology: Topology
    application_id: str | None
    repartitions: list[RepartitionTopic] = field(default_factory=list)

    def repartition_topic(self, name: str) -> str:
        """``<application.id>-<name>-repartition``.

        Raises:
            TopologyError: the application id is not known (``build()`` without one).
        """
        if self.application_id is None:
            raise TopologyError(
                f"repartition {name!r} needs the application id: build(application_id=...),"
                " or hand the builder itself to `worker start --app`"
            )
        return f"{self.application_id}-{name}-repartition"


Write = Callable[[Compilation], None]


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One node of the logical graph: what kind it is (for error messages), its name
    (the topology node it becomes, if any) and how it writes itself."""

    kind: str
    name: str
    write: Write


class DslTopology(Topology):
    """A ``Topology`` compiled from the DSL: it knows its application id and which of its
    topics are repartition topics (internal: created by the worker, sized as their writer
    sub-topology)."""

    def __init__(self, application_id: str | None) -> None:
        super().__init__()
        self.application_id = application_id
        self.repartition_topics: tuple[RepartitionTopic, ...] = ()


class Plan:
    """The steps of one builder and the counter its generated names come from."""

    def __init__(self) -> None:
        self.steps: list[PlanStep] = []
        self._counter = 0
        self._names: set[str] = set()

    def name(self, prefix: str, given: str | None = None) -> str:
        """``given``, or ``<PREFIX>-<10-digit counter>`` (Kafka Streams' scheme). The counter
        advances either way ("burn index"), so naming one operation never renames the
        generated names after it."""
        index = self._counter
        self._counter += 1
        return given if given is not None else f"{prefix}-{index:010d}"

    def add(self, kind: str, name: str, write: Write) -> str:
        """Record a step; returns its name. Raises TopologyError for a name taken."""
        if name in self._names:
            raise TopologyError(f"{kind}: the name {name!r} is already used")
        self._names.add(name)
        self.steps.append(PlanStep(kind, name, write))
        return name

    def compile(self, application_id: str | None) -> DslTopology:
        """A fresh topology with every step written into it, in order."""
        topology = DslTopology(application_id)
        compilation = Compilation(topology, application_id)
        for step in self.steps:
            step.write(compilation)
        topology.repartition_topics = tuple(compilation.repartitions)
        return topology
