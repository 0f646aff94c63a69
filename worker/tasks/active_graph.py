"""What an active task runs records with: its graph, its failure policy, its punctuators.

Built together whenever a task becomes active (opened as one, or recycled into one),
because all three share the task's processor context and record error handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.processing import timestamps
from worker.processing.built_topology import Subtopology
from worker.processing.graph import TaskGraph
from worker.processing.handlers import ExceptionPolicy, RecordErrorHandler
from worker.processing.internal_topics import dlq_topic
from worker.processing.punctuators import TaskPunctuators
from worker.state.store import Store
from worker.tasks.failures import ProcessingFailures


@dataclass(frozen=True)
class ActiveGraph:
    graph: TaskGraph
    failures: ProcessingFailures
    punctuators: TaskPunctuators


def build_active_graph(
    task_id: str,
    subtopology: Subtopology,
    stores: Mapping[str, Store],
    ctx: Any,
    stream_time: int,
    log: Any,
) -> ActiveGraph:
    """The graph over ``stores`` (open), resuming at ``stream_time``; ``ctx`` is the
    worker's :class:`~worker.tasks.task.TaskContext`. Every store's writes are stamped
    with the graph context's timestamp from now on."""
    settings = ctx.settings
    errors = RecordErrorHandler(
        task_id,
        ExceptionPolicy(settings.default_deserialization_exception_handler),
        ExceptionPolicy(settings.processing_exception_handler),
        dlq_topic(settings.application_id),
        ctx.collector,
        ctx.metrics,
        ctx.clock,
        log,
        settings.max_record_bytes,
    )
    failures = ProcessingFailures(errors, settings.processing_exception_max_retries, log)
    extractor = timestamps.resolve(settings.timestamp_extractor)
    clock = ctx.clock
    future = timestamps.FutureBound(
        settings.timestamp_max_future_ms, lambda: int(clock.wall() * 1000)
    )
    readable = {**ctx.global_stores, **stores}  # the global tables its processors read
    graph = TaskGraph(subtopology, task_id, readable, ctx.collector, errors, extractor, future)
    graph.context.stream_time = stream_time
    for store in stores.values():
        store.stamp_writes(graph.context)
    punctuators = TaskPunctuators(
        graph.context, subtopology.processors, ctx.clock, ctx.metrics, failures
    )
    return ActiveGraph(graph, failures, punctuators)
