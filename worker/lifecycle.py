"""One small state machine for every lifecycle: tasks, the worker, the group member,
transactions and changelog partitions.

Each lifecycle declares an enum of states and a table of allowed moves; the machine holds
the current state and changes it only through :meth:`StateMachine.transition`, which
refuses a move the table does not allow, logs ``<name>.transition`` with the logger's
bound context (task id, role, group) and counts it. Keeping the guard, the log line and
the metrics in one place is what makes a lifecycle readable from its table alone.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

from worker.errors import FatalError
from worker.events import transition_event

S = TypeVar("S", bound=enum.Enum)


class IllegalTransition(FatalError):
    """A lifecycle bug: the code tried a move its state machine forbids."""


class _Labelled(Protocol):
    """A Prometheus metric with labels (Counter or Gauge)."""

    def labels(self, *values: str, **labels: str) -> Any: ...


class StateMachine(Generic[S]):
    """Holds one lifecycle's state; the only way to change it is :meth:`transition`.

    ``transitions`` (a Counter labelled ``to``) counts every move; ``gauge`` (a Gauge
    labelled ``state``) shows 1 for the current state and 0 for the others. With
    ``repeat_ok`` a move to the current state is a silent no-op (for states that are
    sampled, like the worker's); without it such a move must be in the table.
    Not thread-safe: one thread owns each machine.
    """

    __slots__ = (
        "name",
        "_state",
        "_allowed",
        "log",
        "_transitions",
        "_gauge",
        "_repeat_ok",
        "_level",
    )

    def __init__(
        self,
        name: str,
        initial: S,
        allowed: Mapping[S, frozenset[S]],
        log: Any,
        *,
        transitions: _Labelled | None = None,
        gauge: _Labelled | None = None,
        repeat_ok: bool = False,
        level: str = "info",
    ) -> None:
        missing = [s for s in type(initial) if s not in allowed]
        if missing:
            raise ValueError(f"{name}: no allowed moves given for {missing}")
        self.name = name
        self._state = initial
        self._allowed = allowed
        self.log = log  # rebound by owners whose context changes (a task's role)
        self._transitions = transitions
        self._gauge = gauge
        self._repeat_ok = repeat_ok
        self._level = level  # the log level of transitions; "debug" for per-commit ones
        self._publish()

    @property
    def state(self) -> S:
        return self._state

    def transition(self, target: S, reason: str = "", **context: Any) -> None:
        """Move to ``target``; log and count it. Raises IllegalTransition if not allowed."""
        if target is self._state and self._repeat_ok:
            return
        if target not in self._allowed[self._state]:
            raise IllegalTransition(
                f"{self.name}: {self._state.value} -> {target.value} is not allowed"
            )
        getattr(self.log, self._level)(
            transition_event(self.name),
            src=self._state.value,
            dst=target.value,
            reason=reason,
            **context,
        )
        self._state = target
        if self._transitions is not None:
            self._transitions.labels(to=target.value).inc()
        self._publish()

    def _publish(self) -> None:
        if self._gauge is None:
            return
        for state in type(self._state):
            self._gauge.labels(state=state.value).set(1 if state is self._state else 0)
