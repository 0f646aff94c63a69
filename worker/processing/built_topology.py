"""The built graph a :class:`worker.processing.topology.Topology` compiles to: its nodes,
store specs and sub-topologies, which the runtime, the topic planner and the tools read.

Apart from the builder so that everything that only reads a topology depends on these
plain, frozen records and not on the rules of building one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.processing.join_windows import JoinWindows
from worker.processing.windows import SessionWindows, SlidingWindows, TimeWindows
from worker.serde import Serde

if TYPE_CHECKING:
    from worker.processing.context import ProcessorContext

ProcessorFn = Callable[["ProcessorContext", Any, Any], None]
# Runs when a task starts running the processor; may ctx.schedule punctuators.
InitFn = Callable[["ProcessorContext"], object]


@dataclass(frozen=True, slots=True)
class SourceNode:
    name: str
    topic: str
    key_serde: Serde
    value_serde: Serde
    table_store: str | None = None  # set for tables: the store this topic upserts
    # an internal topic sized as the other topics of the sub-topology reading it, not as
    # its writer's (the foreign-key join's: see worker.kafka.topics.repartitions_of)
    partitioned_as_reader: bool = False


@dataclass(frozen=True, slots=True)
class ProcessorNode:
    name: str
    fn: ProcessorFn
    parents: tuple[str, ...]
    stores: tuple[str, ...]
    init: InitFn | None = None


@dataclass(frozen=True, slots=True)
class SinkNode:
    name: str
    topic: str
    parents: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """A key-value store. ``changelog_topic`` is None until the application id is known."""

    name: str
    key_serde: Serde
    value_serde: Serde
    source_topic: str | None = None  # tables: the topic that is source and changelog
    ttl_ms: int | None = None  # keys expire this long after their write (stream time)
    # windowed stores (add_window_store, add_session_store; sliding windows live in a
    # session-shaped store, for windowed aggregations; join windows: a stream-stream
    # join's buffer, add_join_buffer_store): their windows and retention
    windows: TimeWindows | SlidingWindows | SessionWindows | JoinWindows | None = None
    # emit-final aggregations: expiry waits until a window's final result is out
    hold_until_emitted: bool = False
    # versioned stores (add_versioned_store): how far back reads as of a time reach
    history_ms: int | None = None

    @property
    def is_table(self) -> bool:
        return self.source_topic is not None

    @property
    def is_windowed(self) -> bool:
        return self.windows is not None

    def changelog(self, application_id: str) -> str:
        """The topic holding this store's history: ``<app>-<store>-changelog`` or the table topic."""
        return self.source_topic or f"{application_id}-{self.name}-changelog"


@dataclass(frozen=True)
class Subtopology:
    """One connected part of the graph; runs as one task per partition."""

    id: int
    sources: tuple[SourceNode, ...]
    processors: tuple[ProcessorNode, ...]
    sinks: tuple[SinkNode, ...]
    stores: tuple[StoreSpec, ...]
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # the global tables its processors read (every instance holds them whole)
    global_stores: tuple[StoreSpec, ...] = ()

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(s.topic for s in self.sources)

    def changelog_topics(self, application_id: str) -> dict[str, str]:
        """store name -> changelog topic."""
        return {s.name: s.changelog(application_id) for s in self.stores}


@dataclass(frozen=True)
class BuiltTopology:
    subtopologies: tuple[Subtopology, ...]
    global_tables: tuple[StoreSpec, ...] = ()

    def source_topics_by_subtopology(self) -> dict[int, tuple[str, ...]]:
        return {st.id: st.source_topics for st in self.subtopologies}

    def changelog_topics_by_subtopology(self, application_id: str) -> dict[int, tuple[str, ...]]:
        """subtopology -> the changelog topics of its stores (tables: their source topic)."""
        return {
            st.id: tuple(spec.changelog(application_id) for spec in st.stores)
            for st in self.subtopologies
        }

    def sink_topics(self) -> set[str]:
        return {sink.topic for st in self.subtopologies for sink in st.sinks}

    def store(self, name: str) -> tuple[Subtopology, StoreSpec]:
        for st in self.subtopologies:
            for spec in st.stores:
                if spec.name == name:
                    return st, spec
        raise KeyError(name)
