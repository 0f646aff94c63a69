"""Reporting, at start-up, internal topics of the application that the topology no longer
names: a rename between deployments.

Where a previous deployment's names are remembered: on the broker. Every internal topic of
an application is ``<application.id>-...-repartition`` or ``-changelog``, so the ones that
exist but are not in this topology are what an earlier topology named and this one does
not (a generated name shifted by an inserted operator, or a renamed store or grouping):
their state and records are not carried over, and the report says so at start, with the
names in use, instead of letting the state silently restart empty. (The repartition
topics themselves are planned and created with the others: ``worker.kafka.topics``.)
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.events import TOPICS_INTERNAL_UNUSED
from worker.kafka.admin import Admin
from worker.observability import get_logger
from worker.processing.built_topology import BuiltTopology
from worker.processing.repartitions import is_repartition_topic, repartition_writers


def report_unused_internal_topics(
    admin: Admin, topology: BuiltTopology, application_id: str, timeout: float = 10.0
) -> list[str]:
    """Log ``topics.internal_unused`` (a warning) when the broker holds internal topics of
    this application that the topology does not name; returns them (sorted).

    Raises:
        KafkaUnavailable: no metadata within ``timeout`` seconds (start-up retries).
    """
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


def internal_names(topics: Iterable[str], application_id: str) -> list[str]:
    """The internal topics of ``application_id`` among ``topics``, sorted."""
    return sorted(
        t
        for t in topics
        if is_repartition_topic(t, application_id)
        or (t.startswith(f"{application_id}-") and t.endswith("-changelog"))
    )
