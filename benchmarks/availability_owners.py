"""Who owned each task when, and which tasks moved in an event's window, read from the
workers' JSON logs for the availability benchmark.

**Owners come from the workers' JSON logs, not from polling ``/tasks``.** The logs hold
every assignment a worker applied, stamped to the microsecond, written before a kill -9
can lose them, and readable after the worker is gone; a poller sees a dead worker as
nothing, a busy one late, and misses an assignment that lasted less than its interval.
What the benchmark reads, per worker (the event names are declared in :mod:`worker.events`;
the fields must stay, or ``worker_timeline`` change with them):

- ``assignment.applied`` with ``active``, ``standby`` and ``warmup`` lists of task ids:
  the worker's whole assignment from that moment (the owner of a task is the worker
  whose latest applied assignment lists it as active; a worker gives up every task
  when the benchmark sends it SIGTERM or SIGKILL);
- ``handover.taken_over`` with ``task_id``: the worker read the old owner's release of
  a task its assignment gave it as a standby to take over, and runs it as active from
  then on (worker/tasks/handover.py; its next assignment lists it as active);
- ``initial_standbys.opened`` with ``tasks``: local state it opened before its first
  assignment (a restarted worker's copy of its old tasks);
- ``restore.done`` with ``task_id``, ``role`` and ``records``: what a moved task restored
  on its new owner before it ran (a caught-up copy restores a short tail);
- rebalance rounds, for the report only: a round starts at a ``membership.transition``
  out of ``stable`` or into ``joining`` (the member's state machine), and ends at the next
  ``membership.assigned`` or ``membership.transition`` into ``stable``, whichever comes
  first; ``membership.started`` begins a new run. Unknown events are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.log_events import log_time
from worker.events import (
    ASSIGNMENT_APPLIED,
    HANDOVER_TAKEN_OVER,
    INITIAL_STANDBYS_OPENED,
    MEMBERSHIP_ASSIGNED,
    MEMBERSHIP_STARTED,
    MEMBERSHIP_TRANSITION,
    RESTORE_DONE,
)

# The topology in 6 partitions: tasks 0_0..0_5, task 0_p writes partition p of the outputs.
PARTITIONS = 6
TASKS = [f"0_{p}" for p in range(PARTITIONS)]


KILL = "kill -9"  # the kind of an event that SIGKILLed its worker


@dataclass(frozen=True)
class Event:
    at: float  # epoch s, when the signal was sent or the process launched
    kind: str  # "SIGTERM", "start", "kill -9"
    worker: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.worker}"


@dataclass(frozen=True)
class Move:
    """A task that changed owner in an event's window."""

    before: str | None  # its owner at the window's start
    after: str | None  # the first other owner it got in the window (None: nobody yet)
    had: str | None  # what the new owner held of it before: standby, warmup, local state
    restored: int | None  # records it restored on the new owner before running
    handover_seconds: float | None  # from its old owner giving it up to the new one's assignment


@dataclass
class _Change:
    """One worker's assignment from ``at`` on (``exited``: it owns nothing any more)."""

    at: float
    worker: str
    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    local: frozenset[str] = frozenset()  # initial standbys opened from its state dir
    taken: str | None = None  # a task taken over on its old owner's release
    exited: bool = False
    first_of_run: bool = False


@dataclass
class _Timeline:
    changes: list[_Change] = field(default_factory=list)
    rounds: list[tuple[float, float]] = field(default_factory=list)
    restores: list[tuple[float, str, int]] = field(default_factory=list)  # (at, task, records)


def _tasks(value: Any) -> frozenset[str]:
    if isinstance(value, list | tuple):
        return frozenset(str(v) for v in value)
    return frozenset()


def worker_timeline(
    name: str, events: Sequence[dict[str, Any]], exits: Sequence[float]
) -> _Timeline:
    """What one worker's log lines (every run of it) and its exits say, in time order."""
    timeline = _Timeline()
    round_start: float | None = None
    local: frozenset[str] = frozenset()
    for event in events:
        kind = str(event.get("event", ""))
        try:
            at = log_time(event)
        except (KeyError, ValueError):
            continue
        if kind == MEMBERSHIP_STARTED:
            round_start = None  # a new run: a join the last one left unfinished is over
        elif kind == INITIAL_STANDBYS_OPENED:
            local = _tasks(event.get("tasks"))
            timeline.changes.append(_Change(at, name, local=local))
        elif kind == ASSIGNMENT_APPLIED:
            timeline.changes.append(
                _Change(
                    at,
                    name,
                    active=_tasks(event.get("active")),
                    standby=_tasks(event.get("standby")),
                    warmup=_tasks(event.get("warmup")),
                )
            )
        elif kind == HANDOVER_TAKEN_OVER:
            timeline.changes.append(_Change(at, name, taken=str(event.get("task_id"))))
        elif kind == RESTORE_DONE and event.get("role") == "active":
            timeline.restores.append((at, str(event.get("task_id")), int(event.get("records", 0))))
        elif _round_starts(kind, event):
            round_start = at if round_start is None else round_start
        elif _round_ends(kind, event) and round_start is not None:
            timeline.rounds.append((round_start, at))
            round_start = None
    timeline.changes += [_Change(at, name, exited=True) for at in exits]
    timeline.changes.sort(key=lambda c: c.at)
    return timeline


def _round_starts(kind: str, event: dict[str, Any]) -> bool:
    if kind != MEMBERSHIP_TRANSITION:
        return False
    return str(event.get("src", "")).lower() == "stable" or (
        str(event.get("dst", "")).lower() == "joining"
    )


def _round_ends(kind: str, event: dict[str, Any]) -> bool:
    if kind == MEMBERSHIP_ASSIGNED:
        return True
    return kind == MEMBERSHIP_TRANSITION and str(event.get("dst", "")).lower() == "stable"


@dataclass
class _Held:
    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    local: frozenset[str] = frozenset()

    def had(self, task: str) -> str | None:
        for kind, tasks in (
            ("standby", self.standby),
            ("warmup", self.warmup),
            ("local state", self.local),
        ):
            if task in tasks:
                return kind
        return None


@dataclass(frozen=True)
class _Takeover:
    at: float
    task: str
    owner: str | None
    had: str | None  # what ``owner`` held of the task just before


def replay(timelines: dict[str, _Timeline]) -> list[_Takeover]:
    """Every change of a task's owner, in time order (owner None: its owner exited)."""
    changes = sorted((c for t in timelines.values() for c in t.changes), key=lambda c: c.at)
    held: dict[str, _Held] = {}
    owner: dict[str, str | None] = {}
    out: list[_Takeover] = []
    for change in changes:
        before = held.get(change.worker, _Held())
        if change.exited:
            held[change.worker] = _Held()
            for task, who in list(owner.items()):
                if who == change.worker:
                    owner[task] = None
                    out.append(_Takeover(change.at, task, None, None))
            continue
        if change.local:
            held[change.worker] = _Held(local=change.local)
            continue
        if change.taken is not None:
            task = change.taken
            held[change.worker] = _Held(
                before.active | {task}, before.standby - {task}, before.warmup, before.local
            )
            if owner.get(task) != change.worker:
                owner[task] = change.worker
                out.append(_Takeover(change.at, task, change.worker, before.had(task)))
            continue
        held[change.worker] = _Held(change.active, change.standby, change.warmup)
        for task, who in list(owner.items()):
            if who == change.worker and task not in change.active:
                owner[task] = None
                out.append(_Takeover(change.at, task, None, None))
        for task in sorted(change.active):
            if owner.get(task) != change.worker:
                owner[task] = change.worker
                out.append(_Takeover(change.at, task, change.worker, before.had(task)))
    return out


def _owner_at(takeovers: Sequence[_Takeover], task: str, at: float) -> str | None:
    who: str | None = None
    for takeover in takeovers:
        if takeover.at >= at:
            break
        if takeover.task == task:
            who = takeover.owner
    return who


def moved_tasks(
    takeovers: Sequence[_Takeover], timelines: dict[str, _Timeline], start: float, end: float
) -> dict[str, Move]:
    moved: dict[str, Move] = {}
    for task in TASKS:
        first = _owner_at(takeovers, task, start)
        inside = [t for t in takeovers if t.task == task and start <= t.at < end]
        changed = [t for t in inside if t.owner != first]
        if not changed:
            continue
        new = next((t for t in changed if t.owner is not None), None)
        if new is None or new.owner is None:
            moved[task] = Move(first, None, None, None, None)
            continue
        restored = next(
            (n for at, t, n in timelines[new.owner].restores if t == task and new.at <= at < end),
            None,
        )
        # Given up (owner None) before the new owner's assignment: the handover took that
        # long. Taken straight from one owner by the next: no time between them.
        before = [t for t in inside if t.at <= new.at and t is not new]
        lost = before[-1].at if before and before[-1].owner is None else new.at
        moved[task] = Move(first, new.owner, new.had, restored, new.at - lost)
    return moved


def ownership(takeovers: Sequence[_Takeover]) -> dict[str, list[tuple[float, str | None]]]:
    spans: dict[str, list[tuple[float, str | None]]] = {t: [] for t in TASKS}
    for takeover in takeovers:
        if takeover.task in spans:
            spans[takeover.task].append((takeover.at, takeover.owner))
    return spans
