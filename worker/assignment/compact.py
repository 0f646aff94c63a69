"""The compact binary encodings (version 2) of subscriptions, assignments and routing maps.

Layouts, after the envelope :mod:`worker.assignment.model` writes (a marker byte, the
version, and for a subscription the latest version the member reads), in
:mod:`worker.assignment.wire` blocks:

Subscription: process id (id), endpoint (str), rebalance requests (uint), the tasks
the member reports (task set), per task in that order a flags uint (1: running it as
active, 2: holding it as standby or warmup, 4: an offset sum follows) and the offset
sum (int), then the pending moves it echoes (:func:`write_moves`), then the member's
flags (uint; 1: leaving, see ``Subscription.leaving``): a reader that predates them
stops before them, and one that knows them reads their absence (an older writer) as 0.

Assignment: actives, standbys, warmups (task sets), next probe (int), the directory
endpoint (str: where the group's routing map can be fetched), whether the routing map
follows (uint 0/1) and then the map (:func:`write_hosts`), then the pending moves.

Routing map (``GET /routing``): generation (int), then the map.

Fields are read in order and bytes after the last known field are ignored, so a later
minor addition goes at the end without a version bump.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.assignment.task_id import TaskId
from worker.assignment.wire import Reader, Writer

_ACTIVE = 1
_STANDBY = 2
_HAS_SUM = 4
_LEAVING = 1  # member flags

Hosts = Mapping[str, frozenset[TaskId]]


def write_subscription(out: Writer, sub: Any) -> None:
    """``sub`` is a :class:`~worker.assignment.model.Subscription`."""
    out.ident(sub.process_id)
    out.text(sub.endpoint)
    out.uint(sub.rebalance_requests)
    tasks = sorted({*sub.task_offset_sums, *sub.prev_active, *sub.prev_standby})
    out.tasks(tasks)
    for task in tasks:
        flags = (_ACTIVE if task in sub.prev_active else 0) | (
            _STANDBY if task in sub.prev_standby else 0
        )
        offset_sum = sub.task_offset_sums.get(task)
        out.uint(flags | (_HAS_SUM if offset_sum is not None else 0))
        if offset_sum is not None:
            out.sint(offset_sum)
    write_moves(out, sub.pending_moves)
    out.uint(_LEAVING if sub.leaving else 0)


def read_subscription(data: Reader) -> dict[str, Any]:
    """The fields of a :class:`~worker.assignment.model.Subscription`, by name."""
    process_id, endpoint, requests = data.ident(), data.text(), data.uint()
    sums: dict[TaskId, int] = {}
    active: set[TaskId] = set()
    standby: set[TaskId] = set()
    for task in data.tasks():
        flags = data.uint()
        if flags & _ACTIVE:
            active.add(task)
        if flags & _STANDBY:
            standby.add(task)
        if flags & _HAS_SUM:
            sums[task] = data.sint()
    return {
        "process_id": process_id,
        "endpoint": endpoint,
        "task_offset_sums": sums,
        "prev_active": frozenset(active),
        "prev_standby": frozenset(standby),
        "rebalance_requests": requests,
        "pending_moves": read_moves(data),
        "leaving": bool((0 if data.done else data.uint()) & _LEAVING),
    }


def write_assignment(out: Writer, assignment: Any) -> None:
    """``assignment`` is a :class:`~worker.assignment.model.Assignment`; its host maps
    are written only when it carries them (the directory member's)."""
    out.tasks(assignment.active)
    out.tasks(assignment.standby)
    out.tasks(assignment.warmup)
    out.sint(assignment.next_probe_ms)
    out.text(assignment.directory)
    has_map = bool(assignment.active_hosts or assignment.standby_hosts)
    out.uint(1 if has_map else 0)
    if has_map:
        write_hosts(out, assignment.active_hosts, assignment.standby_hosts)
    write_moves(out, assignment.pending_moves)


def read_assignment(data: Reader) -> dict[str, Any]:
    """The fields of an :class:`~worker.assignment.model.Assignment`, by name."""
    fields: dict[str, Any] = {
        "active": frozenset(data.tasks()),
        "standby": frozenset(data.tasks()),
        "warmup": frozenset(data.tasks()),
        "next_probe_ms": data.sint(),
        "directory": data.text(),
        "active_hosts": {},
        "standby_hosts": {},
    }
    if data.uint():
        fields["active_hosts"], fields["standby_hosts"] = read_hosts(data)
    fields["pending_moves"] = read_moves(data)
    return fields


def write_hosts(out: Writer, active: Hosts, standby: Hosts) -> None:
    """Endpoint -> (active tasks, standby tasks), endpoints in order."""
    endpoints = sorted({*active, *standby})
    out.uint(len(endpoints))
    for endpoint in endpoints:
        out.text(endpoint)
        out.tasks(active.get(endpoint, ()))
        out.tasks(standby.get(endpoint, ()))


def read_hosts(data: Reader) -> tuple[dict[str, frozenset[TaskId]], dict[str, frozenset[TaskId]]]:
    """(active hosts, standby hosts); an endpoint without tasks of a kind is left out."""
    active: dict[str, frozenset[TaskId]] = {}
    standby: dict[str, frozenset[TaskId]] = {}
    for _ in range(data.uint()):
        endpoint = data.text()
        for hosts, tasks in ((active, data.tasks()), (standby, data.tasks())):
            if tasks:
                hosts[endpoint] = frozenset(tasks)
    return active, standby


def write_moves(out: Writer, moves: Mapping[TaskId, str]) -> None:
    """Task -> client key, grouped by key: each key (an id) once, with its tasks."""
    by_target: dict[str, list[TaskId]] = {}
    for task, target in moves.items():
        by_target.setdefault(target, []).append(task)
    out.uint(len(by_target))
    for target in sorted(by_target):
        out.ident(target)
        out.tasks(by_target[target])


def read_moves(data: Reader) -> dict[TaskId, str]:
    moves: dict[TaskId, str] = {}
    for _ in range(data.uint()):
        target = data.ident()
        for task in data.tasks():
            moves[task] = target
    return moves
