"""Operators: the compound processors a topology (or the DSL) is built from, each owning
its stores through the contracts of ``worker.state.contracts``.

Windowed aggregations, one per window kind: :class:`TumblingAggregation`,
:class:`HoppingAggregation`, :class:`SlidingAggregation`, :class:`SessionAggregation`
(their shared part: :class:`WindowedAggregation`); :func:`windowed_aggregation` picks
the one for a ``Windows``.

The DSL's: the stateless processors (:mod:`.stateless`), grouped-stream aggregations
(:mod:`.stream_aggregation`), table re-grouping with an adder and a subtractor
(:mod:`.table_regroup`, with the :class:`~.change.Change` it sends).
"""

from __future__ import annotations

from typing import Any

from worker.errors import TopologyError
from worker.operators.hopping import HoppingAggregation
from worker.operators.session import SessionAggregation
from worker.operators.sliding import SlidingAggregation
from worker.operators.tumbling import TumblingAggregation
from worker.operators.windowed import (
    Aggregator,
    Initializer,
    Merger,
    WindowedAggregation,
    check_functions,
)
from worker.processing.windows import SessionWindows, SlidingWindows, Windows
from worker.serde import Serde

__all__ = [
    "HoppingAggregation",
    "SessionAggregation",
    "SlidingAggregation",
    "TumblingAggregation",
    "WindowedAggregation",
    "windowed_aggregation",
]


def windowed_aggregation(
    name: str,
    windows: Windows,
    initializer: Initializer,
    aggregator: Aggregator,
    merger: Merger | None,
    emit: str,
    key_serde: Serde,
    value_serde: Serde,
) -> WindowedAggregation[Any, Any]:
    """The aggregation operator for the kind of ``windows``.

    Raises:
        TopologyError: ``emit`` is not ``"update"`` or ``"final"``, a function is not
            callable, or ``merger`` is missing for sessions (or given for other windows).
    """
    check_functions(name, emit, initializer, aggregator)
    if isinstance(windows, SessionWindows) != (merger is not None):
        raise TopologyError(
            f"aggregation {name!r}: merger is required for session windows and "
            "refused for the other kinds"
        )
    if isinstance(windows, SessionWindows):
        assert merger is not None
        return SessionAggregation(
            name, windows, initializer, aggregator, merger, emit, key_serde, value_serde
        )
    if isinstance(windows, SlidingWindows):
        return SlidingAggregation(
            name, windows, initializer, aggregator, emit, key_serde, value_serde
        )
    kind = TumblingAggregation if windows.size_ms == windows.advance_ms else HoppingAggregation
    return kind(name, windows, initializer, aggregator, emit, key_serde, value_serde)
