"""The topics a topology needs: source topics checked, changelogs created, co-partitioning verified.

Runs once at start-up, before the worker joins the group, so a missing or mis-sized
topic is a clear error instead of a task that never makes progress.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import KafkaUnavailable, TopologyError
from worker.kafka.admin import Admin, TopicSpec
from worker.processing.topology import BuiltTopology, StoreSpec

CHANGELOG_CONFIG = {"cleanup.policy": "compact"}
# Kafka Streams' windowstore.changelog.additional.retention.ms: a windowed changelog keeps
# records this much longer than the store does ("clock drift").
WINDOW_CHANGELOG_MARGIN_MS = 24 * 3600 * 1000
# Set explicitly: some brokers describe back only the configs given at creation.
DLQ_CONFIG = {"cleanup.policy": "delete"}


def changelog_config(
    spec: StoreSpec, margin_ms: int = WINDOW_CHANGELOG_MARGIN_MS
) -> dict[str, str]:
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
    """Check sources and sinks, create missing changelogs; return tasks per sub-topology.

    With ``dead_letter`` (an exception handler is set to ``dead_letter``) the dead-letter
    topic must exist too, and is created like the changelogs when missing and allowed,
    with as many partitions as the largest sub-topology has tasks. Changelogs are created
    with :func:`changelog_config` (``window_margin_ms``: its margin). Raises
    KafkaUnavailable when the topics' metadata does not come within ``metadata_timeout``
    seconds (the caller may retry: nothing was created yet).

    Raises TopologyError naming the topic when a source or sink is missing, when the
    sources of one sub-topology are not co-partitioned, when an existing changelog has
    a different partition count than its sub-topology, or when an internal topic is
    missing and ``internal.topics.create`` is false.
    """
    sources = {t for st in topology.subtopologies for t in st.source_topics}
    changelogs = {
        topic: st.id
        for st in topology.subtopologies
        for spec in st.stores
        if not spec.is_table
        for topic in [spec.changelog(application_id)]
    }
    configs = {
        spec.changelog(application_id): changelog_config(spec, window_margin_ms)
        for st in topology.subtopologies
        for spec in st.stores
    }
    dlq = {dlq_topic(application_id)} if dead_letter else set()
    wanted = sources | topology.sink_topics() | set(changelogs) | dlq
    counts = admin.partition_counts(wanted, timeout=metadata_timeout)
    missing = sorted(t for t in sources | topology.sink_topics() if t not in counts)
    if missing:
        raise TopologyError(f"topics do not exist: {', '.join(missing)} (create them first)")
    layout: dict[int, int] = {}
    for st in topology.subtopologies:
        sizes = {topic: counts[topic] for topic in st.source_topics}
        if len(set(sizes.values())) != 1:
            detail = ", ".join(f"{t}={n}" for t, n in sorted(sizes.items()))
            raise TopologyError(
                f"sub-topology {st.id} reads topics that are not co-partitioned: {detail}"
            )
        layout[st.id] = next(iter(sizes.values()))
    _ensure_changelogs(admin, changelogs, configs, counts, layout, create_internal)
    for topic in dlq - set(counts):
        if not create_internal:
            raise TopologyError(
                f"dead-letter topic {topic} does not exist and internal.topics.create is false"
            )
        admin.create_topics([TopicSpec(topic, max(layout.values()), DLQ_CONFIG)])
    return TopicLayout(layout)


def _ensure_changelogs(
    admin: Admin,
    changelogs: dict[str, int],
    configs: dict[str, dict[str, str]],
    counts: dict[str, int],
    layout: dict[int, int],
    create_internal: bool,
) -> None:
    to_create: list[TopicSpec] = []
    for topic, st_id in sorted(changelogs.items()):
        want = layout[st_id]
        if topic in counts:
            if counts[topic] != want:
                raise TopologyError(
                    f"changelog {topic} has {counts[topic]} partitions, expected {want}"
                )
        elif not create_internal:
            raise TopologyError(
                f"changelog {topic} does not exist and internal.topics.create is false"
            )
        else:
            to_create.append(TopicSpec(topic, want, configs[topic]))
    admin.create_topics(to_create)


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
