"""The record-at-a-time processors behind the DSL's stateless operations.

Each factory returns a ``fn(ctx, key, value)`` for ``Topology.add_processor``; the user's
function is bound once, so a record costs one call of it plus the forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from worker.processing.context import ProcessorContext

# Topology's ProcessorFn, restated: operators never import the topology builder (it imports them).
ProcessorFn = Callable[[ProcessorContext, Any, Any], None]

Predicate = Callable[[Any, Any], bool]


def filtering(predicate: Predicate, keep: bool = True) -> ProcessorFn:
    """Forward the records for which ``predicate(key, value)`` is ``keep``."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        if bool(predicate(key, value)) is keep:
            ctx.forward(key, value)

    return run


def table_filtering(predicate: Predicate, keep: bool = True) -> ProcessorFn:
    """A table's filter: a row that fails becomes a tombstone (so downstream deletes it);
    tombstones pass on as they are."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        if value is None or bool(predicate(key, value)) is keep:
            ctx.forward(key, value)
        else:
            ctx.forward(key, None)

    return run


def mapping(mapper: Callable[[Any, Any], tuple[Any, Any]]) -> ProcessorFn:
    """Forward ``mapper(key, value)``, a new (key, value) pair."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        new_key, new_value = mapper(key, value)
        ctx.forward(new_key, new_value)

    return run


def mapping_values(mapper: Callable[[Any], Any], skip_none: bool = False) -> ProcessorFn:
    """Forward ``(key, mapper(value))``; with ``skip_none`` (tables) a tombstone stays one."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        if skip_none and value is None:
            ctx.forward(key, None)
        else:
            ctx.forward(key, mapper(value))

    return run


def selecting_key(selector: Callable[[Any, Any], Any]) -> ProcessorFn:
    """Forward ``(selector(key, value), value)``."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        ctx.forward(selector(key, value), value)

    return run


def flat_mapping(mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> ProcessorFn:
    """Forward every (key, value) pair of ``mapper(key, value)``, in order."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        for new_key, new_value in mapper(key, value):
            ctx.forward(new_key, new_value)

    return run


def flat_mapping_values(mapper: Callable[[Any], Iterable[Any]]) -> ProcessorFn:
    """Forward ``(key, v)`` for every ``v`` of ``mapper(value)``, in order."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        for new_value in mapper(value):
            ctx.forward(key, new_value)

    return run


def peeking(action: Callable[[Any, Any], object]) -> ProcessorFn:
    """Call ``action(key, value)``, then forward the record unchanged."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        action(key, value)
        ctx.forward(key, value)

    return run


def passing(ctx: ProcessorContext, key: Any, value: Any) -> None:
    """Forward the record unchanged (merges, named branches)."""
    ctx.forward(key, value)


def dropping_null_keys(ctx: ProcessorContext, key: Any, value: Any) -> None:
    """Forward records with a key: what a repartition topic takes (a None key has no
    partition to go to, and no group downstream)."""
    if key is not None:
        ctx.forward(key, value)


def branching(branches: Sequence[tuple[str, Predicate | None]]) -> ProcessorFn:
    """Forward each record to the first branch whose predicate holds (None: always), by
    the branch's child name; a record no branch takes is dropped."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        for child, predicate in branches:
            if predicate is None or predicate(key, value):
                ctx.forward(key, value, to=child)
                return

    return run


def materializing(store: str) -> ProcessorFn:
    """Upsert each record into ``store`` (a None value deletes), then forward it: a
    stream turned into a table (``to_table``)."""

    def run(ctx: ProcessorContext, key: Any, value: Any) -> None:
        if key is None:
            return
        table = ctx.store(store)
        if value is None:
            table.delete(key)
        else:
            table.put(key, value)
        ctx.forward(key, value)

    return run
