"""TaskId: ``<subtopology>_<partition>``, the name of a task and of its state directory."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Canonical decimal only (what ``str(TaskId)`` writes): "00_03" or "0_3\n" would name
# another directory than task 0_3, so a wipe of 0_3 would leave it in place. ASCII digits
# only, as ``\d`` also matches other scripts' digits, which ``int`` would accept.
_PATTERN = re.compile(r"(0|[1-9][0-9]*)_(0|[1-9][0-9]*)")

# A topic-partition, (topic, partition): how tasks, clients and the planner name the
# partitions a task reads and the changelogs it writes. Defined here, in the module every
# layer may import, so there is one definition.
TP = tuple[str, int]


@dataclass(frozen=True, slots=True, order=True)
class TaskId:
    """One unit of work: a partition of a sub-topology. Orders by (subtopology, partition)."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """Parse ``"0_3"``; raise ValueError for anything that is not a task directory name.

        Strict: ``parse(text)`` succeeds exactly when ``str(result) == text``.
        """
        match = _PATTERN.fullmatch(text)
        if match is None:
            raise ValueError(f"not a task id: {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    @classmethod
    def is_task_name(cls, text: str) -> bool:
        return _PATTERN.fullmatch(text) is not None
