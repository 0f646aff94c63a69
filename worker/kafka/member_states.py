"""The group member's lifecycle states and the messages it hands the processing loop.

Kept apart from :mod:`worker.kafka.membership` so that the runtime, which only applies
what the member reports, reads the messages without the kafka-python adapter.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    REVOKING = "revoking"
    STABLE = "stable"
    LEFT = "left"


_M = MemberState
# JOINING may end without a SYNCING seen: the state is sampled at each poll, and a broker
# may answer a rejoin with the current generation at once.
ALLOWED: dict[MemberState, frozenset[MemberState]] = {
    _M.UNJOINED: frozenset({_M.JOINING, _M.LEFT}),
    _M.JOINING: frozenset({_M.SYNCING, _M.STABLE, _M.REVOKING, _M.UNJOINED, _M.LEFT}),
    _M.SYNCING: frozenset({_M.STABLE, _M.REVOKING, _M.JOINING, _M.UNJOINED, _M.LEFT}),
    _M.REVOKING: frozenset({_M.JOINING, _M.STABLE, _M.UNJOINED, _M.LEFT}),
    _M.STABLE: frozenset({_M.JOINING, _M.UNJOINED, _M.LEFT}),
    _M.LEFT: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Assigned:
    """A new assignment for this member (``generation`` filled in).

    ``revoked``: the actives this member owned and no longer does. The runtime commits
    and hands them over (recycled into a standby where the assignment keeps one, else
    closed) while handling this message; the member joins again at its next ``poll``
    (the follow-up round) unless the runtime released every one of them in its
    changelog (``GroupMember.handed_over``).
    """

    assignment: Assignment
    revoked: frozenset[TaskId]


@dataclass(frozen=True, slots=True)
class Lost:
    """The group went on without this member (its session expired, or it was fenced).

    Every active it owned may already run elsewhere: its uncommitted work is void. The
    member joins again by itself.
    """

    tasks: frozenset[TaskId]


MembershipEvent = Assigned | Lost
