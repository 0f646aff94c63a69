"""Records given by their parts, run through a task graph the way a task runs them."""

from __future__ import annotations

from typing import Any

from tests.fakes import FakeMessage
from worker.processing.graph import TaskGraph


def feed(
    graph: TaskGraph,
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Any = None,
) -> None:
    """One record: the source's function (``TaskGraph.runner``) with a message."""
    graph.runner(topic)(FakeMessage(topic, partition, offset, key, value, timestamp, headers))
