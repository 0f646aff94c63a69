"""The topics a topology needs, as the broker has them: the plan applied at start-up, then watched.

:func:`prepare_topics` runs once at start-up, before the worker joins the group, so a
missing or mis-sized topic is a clear error instead of a task that never makes progress.
What the topology needs is decided by ``worker.processing.internal_topics`` (pure); this
module only looks the topics up, creates what the plan allows and reports mismatches.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import KafkaUnavailable, TopologyError
from worker.kafka.admin import Admin, TopicSpec
from worker.processing.internal_topics import (
    WINDOW_CHANGELOG_MARGIN_MS,
    InternalTopic,
    Repartition,
    TopicPlan,
    TopicRole,
    dlq_topic,
    plan_internal_topics,
)
from worker.processing.repartitions import repartition_writers
from worker.processing.topology import BuiltTopology

# How a missing or mis-sized topic is named in errors, by role.
_KIND = {
    TopicRole.CHANGELOG: "changelog",
    TopicRole.TABLE: "table topic",
    TopicRole.DEAD_LETTER: "dead-letter topic",
    TopicRole.REPARTITION: "repartition topic",
}


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """Partition count per sub-topology (= its number of tasks)."""

    partitions: dict[int, int]


def prepare_topics(
    admin: Admin,
    topology: BuiltTopology,
    application_id: str,
    create_internal: bool,
    dead_letter: bool = False,
    window_margin_ms: int = WINDOW_CHANGELOG_MARGIN_MS,
    metadata_timeout: float = 10.0,
) -> TopicLayout:
    """Check sources and sinks, apply the internal-topic plan; return tasks per sub-topology.

    1. one metadata request for the sources, the sinks and every internal topic (the
       repartition topics among them: the DSL's, :func:`repartitions_of`);
    2. a missing source or sink is an error (a repartition topic is neither: it is made);
    3. :func:`~worker.processing.internal_topics.plan_internal_topics` over the sources'
       counts (``dead_letter``: an exception handler is set to ``dead_letter``;
       ``window_margin_ms``: the windowed changelogs' retention margin), each repartition
       topic sized as the sub-topology writing it (a foreign-key join's two topics: as
       the sub-topology reading them, :func:`repartitions_of`);
    4. :func:`apply_plan`: the co-partitioned topics (changelogs, repartition topics)
       checked and the missing ones created in one request, then the dead-letter topic if
       missing.

    Raises KafkaUnavailable when the topics' metadata does not come within
    ``metadata_timeout`` seconds (the caller may retry: nothing was created yet).
    Raises TopologyError naming the topic when a source or sink is missing, when the
    sources of one sub-topology are not co-partitioned, when an existing changelog or
    repartition topic has a different partition count than planned, or when an internal topic is
    missing and ``internal.topics.create`` is false.
    """
    repartitions = repartitions_of(topology, application_id)
    sources = {t for st in topology.subtopologies for t in st.source_topics}
    internal = {
        t
        for topics in topology.changelog_topics_by_subtopology(application_id).values()
        for t in topics
    } | {r.topic for r in repartitions}
    if dead_letter:
        internal.add(dlq_topic(application_id))
    externals = (sources | topology.sink_topics()) - {r.topic for r in repartitions}
    counts = admin.partition_counts(externals | internal, timeout=metadata_timeout)
    missing = sorted(t for t in externals if t not in counts)
    if missing:
        raise TopologyError(f"topics do not exist: {', '.join(missing)} (create them first)")
    plan = plan_internal_topics(
        topology,
        application_id,
        {t: counts[t] for t in sources if t in externals},
        repartitions=repartitions,
        dead_letter=dead_letter,
        window_margin_ms=window_margin_ms,
    )
    apply_plan(admin, plan, counts, create_internal)
    return TopicLayout(dict(plan.tasks))


def repartitions_of(topology: BuiltTopology, application_id: str) -> list[Repartition]:
    """The topology's repartition topics (``worker.processing.repartitions``), each sized
    as the sub-topology writing it: the count of its (co-partitioned) sources. A topic
    read ``partitioned_as_reader`` (the foreign-key join's subscription and response
    topics) is sized as the sub-topology reading it instead: the count of its other
    sources, the table whose partitions it must match."""
    sources = {st.id: st.source_topics for st in topology.subtopologies}
    as_reader = {
        s.topic: tuple(o.topic for o in st.sources if not o.partitioned_as_reader)
        for st in topology.subtopologies
        for s in st.sources
        if s.partitioned_as_reader
    }
    return [
        Repartition(topic, sorted(as_reader.get(topic) or sources[writer])[0])
        for topic, writer in sorted(repartition_writers(topology, application_id).items())
    ]


def apply_plan(
    admin: Admin, plan: TopicPlan, counts: dict[str, int], create_internal: bool
) -> None:
    """Create the plan's missing topics and check the existing ones against it.

    ``counts``: the partition counts of the topics that exist. The co-partitioned topics
    are checked first and created together (sorted by name); the others (the dead-letter
    topic) after them. A table's topic is a source, checked before the plan is made.

    Raises TopologyError naming the first topic that exists with another partition count
    than planned (co-partitioned ones only), or that is missing when ``create_internal``
    is false.
    """
    created = [t for t in plan.topics if t.created_here]
    admin.create_topics(_missing([t for t in created if t.co_partitioned], counts, create_internal))
    others = _missing([t for t in created if not t.co_partitioned], counts, create_internal)
    if others:
        admin.create_topics(others)


def _missing(topics: list[InternalTopic], counts: dict[str, int], create: bool) -> list[TopicSpec]:
    """The specs of ``topics`` to create, after checking those that exist."""
    to_create: list[TopicSpec] = []
    for topic in topics:
        _check(topic, counts, create, to_create)
    return to_create


def _check(
    topic: InternalTopic, counts: dict[str, int], create: bool, to_create: list[TopicSpec]
) -> None:
    kind = _KIND[topic.role]
    if topic.name in counts:
        if topic.co_partitioned and counts[topic.name] != topic.partitions:
            raise TopologyError(
                f"{kind} {topic.name} has {counts[topic.name]} partitions,"
                f" expected {topic.partitions}"
            )
    elif not create:
        raise TopologyError(
            f"{kind} {topic.name} does not exist and internal.topics.create is false"
        )
    else:
        to_create.append(TopicSpec(topic.name, topic.partitions, dict(topic.config)))


class TopicWatch:
    """Checks now and then that the topics checked at start-up are still there, as they were.

    A source, sink, changelog or dead-letter topic deleted (or re-created with another
    partition count) under a running worker is otherwise silent on some brokers: the test
    broker even acknowledges writes to a deleted changelog. Called from the processing
    loop; one metadata request per ``interval`` seconds. A broker that does not answer is
    not an error here (readiness covers that).
    """

    def __init__(
        self,
        admin: Admin,
        topology: BuiltTopology,
        application_id: str,
        layout: TopicLayout,
        dead_letter: bool,
        interval: float,
        checked_at: float = float("-inf"),
    ) -> None:
        """``checked_at``: when the topics were last checked (start-up's ``prepare_topics``),
        so the first metadata request of the watch comes one ``interval`` after it."""
        self._admin = admin
        self._interval = interval
        self._next = checked_at + interval
        expected: dict[str, int] = {}
        for st in topology.subtopologies:
            n = layout.partitions[st.id]
            for topic in st.source_topics:
                expected[topic] = n
            for spec in st.stores:
                expected[spec.changelog(application_id)] = n
        self._expected = expected
        self._others = set(topology.sink_topics()) | (
            {dlq_topic(application_id)} if dead_letter else set()
        )
        self._changelogs = {
            spec.changelog(application_id)
            for st in topology.subtopologies
            for spec in st.stores
            if not spec.is_table
        }

    def check(self, now: float) -> None:
        """Raise TopologyError naming every topic that is gone or changed its partitions."""
        if now < self._next:
            return
        self._next = now + self._interval
        try:
            counts = self._admin.partition_counts(
                set(self._expected) | self._others, timeout=min(2.0, self._interval)
            )
        except KafkaUnavailable:
            return
        problems = []
        for topic in sorted(set(self._expected) | self._others):
            kind = "changelog" if topic in self._changelogs else "topic"
            if topic not in counts:
                problems.append(f"{kind} {topic} was deleted")
            elif topic in self._expected and counts[topic] != self._expected[topic]:
                problems.append(
                    f"{kind} {topic} now has {counts[topic]} partitions,"
                    f" {self._expected[topic]} at start-up"
                )
        if problems:
            raise TopologyError(
                "; ".join(problems) + " while the worker ran: local state and offsets no longer"
                " match the topics. Recreate the topics as they were, or reset the application"
            )
