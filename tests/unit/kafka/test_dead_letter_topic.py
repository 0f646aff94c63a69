"""The dead-letter topic is checked and created at start-up with the changelogs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from worker.errors import TopologyError
from worker.kafka.clients import TopicSpec
from worker.kafka.topics import DLQ_CONFIG, dlq_topic, prepare_topics
from worker.processing import Topology
from worker.processing.topology import BuiltTopology
from worker.serde import JSON, STR


class FakeAdmin:
    """``Admin``'s two calls prepare_topics makes, over a dict of existing topics."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        self.created: list[TopicSpec] = []

    def partition_counts(self, topics: Iterable[str], timeout: float = 10.0) -> dict[str, int]:
        return {t: self.topics[t] for t in topics if t in self.topics}

    def create_topics(self, specs: Sequence[TopicSpec], timeout: float = 30.0) -> list[str]:
        for spec in specs:
            self.topics[spec.name] = spec.partitions
            self.created.append(spec)
        return [s.name for s in specs]


def topology() -> BuiltTopology:
    return (
        Topology()
        .add_source("in", "input", key_serde=STR, value_serde=JSON)
        .add_processor("p", lambda ctx, k, v: None, parents=["in"])
        .build()
    )


def test_the_dead_letter_topic_is_created_when_a_handler_dead_letters() -> None:
    admin = FakeAdmin({"input": 3})

    prepare_topics(admin, topology(), "app", create_internal=True, dead_letter=True)  # type: ignore[arg-type]

    assert admin.created == [TopicSpec("app-dlq", 3, DLQ_CONFIG)]
    assert dlq_topic("app") == "app-dlq"


def test_no_dead_letter_topic_without_a_dead_letter_handler() -> None:
    admin = FakeAdmin({"input": 3})

    prepare_topics(admin, topology(), "app", create_internal=True)  # type: ignore[arg-type]

    assert admin.created == []


def test_an_existing_dead_letter_topic_is_used_as_it_is() -> None:
    admin = FakeAdmin({"input": 3, "app-dlq": 1})

    prepare_topics(admin, topology(), "app", create_internal=True, dead_letter=True)  # type: ignore[arg-type]

    assert admin.created == []


def test_a_missing_dead_letter_topic_is_an_error_when_creation_is_off() -> None:
    admin = FakeAdmin({"input": 3})

    with pytest.raises(TopologyError, match="dead-letter topic app-dlq does not exist"):
        prepare_topics(admin, topology(), "app", create_internal=False, dead_letter=True)  # type: ignore[arg-type]
