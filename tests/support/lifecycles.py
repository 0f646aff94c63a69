"""Reaching any state of a lifecycle through its own table of allowed moves.

The lifecycle tests (tasks, the worker) put a machine in each state before trying every
move from it; walking the table, rather than forcing the state, keeps every step legal.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Mapping, Set
from typing import TypeVar

from worker.lifecycle import StateMachine

S = TypeVar("S", bound=enum.Enum)


def path_to(allowed: Mapping[S, Set[S]], start: S, target: S) -> list[S]:
    """The shortest list of allowed moves from ``start`` to ``target``."""
    previous: dict[S, S | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for nxt in sorted(allowed[state], key=str):
            if nxt not in previous:
                previous[nxt] = state
                queue.append(nxt)
    steps: list[S] = []
    at: S | None = target
    while at is not None and at is not start:
        steps.append(at)
        at = previous[at]
    return steps[::-1]


def machine_in(
    new: Callable[[], StateMachine[S]], allowed: Mapping[S, Set[S]], start: S, state: S
) -> StateMachine[S]:
    """A machine from ``new()`` (in ``start``) moved to ``state`` by allowed moves."""
    machine = new()
    for step in path_to(allowed, start, state):
        machine.transition(step)
    assert machine.state is state
    return machine
