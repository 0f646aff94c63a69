"""Creating a topology's repartition topics at start-up, and reporting internal topics of
the application that the topology no longer names (a rename between deployments).

Runs before the other topics are checked (``topics.prepare_topics``), which then finds
the repartition topics like any source and sink and checks that each sub-topology's
sources are co-partitioned. The decisions are pure (:mod:`worker.processing.repartitions`);
this module applies them.

Where a previous deployment's names are remembered: on the broker. Every internal topic of
an application is ``<application.id>-...-repartition`` or ``-changelog``, so the ones that
exist but are not in this topology are what an earlier topology named and this one does
not (a generated name shifted by an inserted operator, or a renamed store or grouping):
their state and records are not carried over, and the report says so at start, with the
new names, instead of letting the state silently restart empty.
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.config import Settings
from worker.errors import TopologyError
from worker.events import TOPICS_INTERNAL_UNUSED
from worker.kafka.admin import Admin, TopicSpec
from worker.observability import get_logger
from worker.processing.repartitions import (
    CONFIG,
    is_repartition_topic,
    repartition_partitions,
    repartition_writers,
)
from worker.processing.topology import BuiltTopology


def ensure_repartition_topics(
    admin: Admin,
    topology: BuiltTopology,
    application_id: str,
    create_internal: bool,
    metadata_timeout: float = 10.0,
) -> dict[str, int]:
    """Create the missing repartition topics, each with its writer's partition count;
    returns every repartition topic's count. The worker's own sink partitions by murmur2
    of the key bytes, as for any sink.

    Raises:
        TopologyError: an existing repartition topic has another partition count (the
            inputs grew: reset the application), one is missing and
            ``internal.topics.create`` is false, or a count cannot be resolved.
        KafkaUnavailable: no metadata within ``metadata_timeout`` seconds.
    """
    writers = repartition_writers(topology, application_id)
    if not writers:
        return {}
    external = {t for st in topology.subtopologies for t in st.source_topics} - set(writers)
    counts = admin.partition_counts(external | set(writers), timeout=metadata_timeout)
    wanted = repartition_partitions(topology, application_id, counts)
    missing: list[TopicSpec] = []
    for topic, partitions in sorted(wanted.items()):
        found = counts.get(topic)
        if found is None:
            missing.append(TopicSpec(topic, partitions, CONFIG))
        elif found != partitions:
            raise TopologyError(
                f"repartition topic {topic} has {found} partitions, its writer's inputs have"
                f" {partitions}: reset the application (delete the topic) to re-partition"
            )
    if missing and not create_internal:
        names = ", ".join(s.name for s in missing)
        raise TopologyError(
            f"repartition topics {names} do not exist and internal.topics.create is false"
        )
    admin.create_topics(missing)
    return wanted


def report_unused_internal_topics(
    admin: Admin, topology: BuiltTopology, application_id: str, timeout: float = 10.0
) -> list[str]:
    """Log ``topics.internal_unused`` (a warning) when the broker holds internal topics of
    this application that the topology does not name; returns them (sorted)."""
    planned = set(repartition_writers(topology, application_id)) | {
        spec.changelog(application_id) for st in topology.subtopologies for spec in st.stores
    }
    found = internal_names(admin.topic_names(timeout), application_id)
    unused = [t for t in found if t not in planned]
    if unused:
        get_logger(component="topics").warning(
            TOPICS_INTERNAL_UNUSED,
            unused=unused,
            planned=sorted(planned),
            hint="a store or repartition topic renamed since an earlier deployment starts"
            " empty; name it explicitly (name=...) to keep its state, or delete the old"
            " topics once they are no longer needed",
        )
    return unused


def _internal(topic: str, application_id: str) -> bool:
    return is_repartition_topic(topic, application_id) or (
        topic.startswith(f"{application_id}-") and topic.endswith("-changelog")
    )


def internal_names(topics: Iterable[str], application_id: str) -> list[str]:
    """The internal topics of ``application_id`` among ``topics``, sorted."""
    return sorted(t for t in topics if _internal(t, application_id))


def prepare_repartitions(
    admin: Admin, topology: BuiltTopology, settings: Settings, metadata_timeout: float
) -> dict[str, int]:
    """Start-up's step: report internal topics the topology no longer names, then
    create the missing repartition topics (:func:`ensure_repartition_topics`)."""
    app = settings.application_id
    report_unused_internal_topics(admin, topology, app, metadata_timeout)
    return ensure_repartition_topics(
        admin, topology, app, settings.internal_topics_create, metadata_timeout
    )
