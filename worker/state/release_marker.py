"""The release marker: the record an old owner writes into a task's changelog to hand the
task over (worker/tasks/handover.py).

It is a tombstone of a reserved key, so whoever restores or tails the changelog applies it
as the deletion of a key no store holds, and no store ever sees it; what it says travels
in one header: the generation of the hand-over and the source offsets the old owner
committed with it (the next record of each source partition to process). Written after
the old owner's last changelog records of the task, in the same commit (under
exactly-once in the same transaction), so a reader that reaches it has read everything
the old owner wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from worker.assignment.task_id import TP

RELEASE_KEY = b"\x00worker.release\x00"
RELEASE_HEADER = "worker.release"


@dataclass(frozen=True, slots=True)
class ReleaseMarker:
    """``generation``: the group generation in which the old owner gave the task up;
    ``offsets``: source partition -> the next offset the new owner processes; ``owner``:
    the client the round gave the task to ('' when the old owner did not learn it)."""

    generation: int
    offsets: Mapping[TP, int] = field(default_factory=dict)
    owner: str = ""

    def headers(self) -> list[tuple[str, bytes]]:
        body = {
            "generation": self.generation,
            "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
            "owner": self.owner,
        }
        return [(RELEASE_HEADER, orjson.dumps(body))]

    @classmethod
    def from_headers(cls, headers: Sequence[tuple[str, Any]] | None) -> ReleaseMarker | None:
        """The marker a record's headers carry; None when they carry none (or garbage)."""
        for name, value in headers or ():
            if name != RELEASE_HEADER or value is None:
                continue
            try:
                body = orjson.loads(value)
                offsets = {(str(t), int(p)): int(o) for t, p, o in body["offsets"]}
                return cls(int(body["generation"]), offsets, str(body.get("owner", "")))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                return None
        return None
