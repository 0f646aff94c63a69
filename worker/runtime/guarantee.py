"""The processing guarantee, chosen once: the producer the collector writes through and the
commit protocol over it.

:func:`choose_guarantee` is the only place that reads ``processing.guarantee`` to decide
how output is written and committed; everything after it is handed the collector and
the protocol it picked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from worker.config import Settings
from worker.errors import RebalanceInProgress
from worker.kafka.collector import RecordCollector, at_least_once_collector
from worker.kafka.transactions import exactly_once_collector, group_metadata
from worker.observability import Metrics
from worker.tasks.commit_protocols import (
    AtLeastOnceCommit,
    CommitProtocol,
    ExactlyOnceCommit,
    GroupMemberView,
)


@dataclass(frozen=True)
class Guarantee:
    """The collector for the tasks' output, and the commit protocol to build once the group
    member exists (exactly-once fences its commits with the member's generation)."""

    collector: RecordCollector
    commit_protocol: Callable[[GroupMemberView], CommitProtocol]


def choose_guarantee(settings: Settings, process_id: str, metrics: Metrics) -> Guarantee:
    """exactly_once_v2: one transactional producer per process (its transactional.id,
    built from the process id, outlives restarts), commits as transactions fenced by the
    member's generation. at_least_once: plain producers, a flush, then the source offsets
    committed through the member."""
    timeout = settings.commit_timeout_s
    if settings.exactly_once:
        collector, transaction = exactly_once_collector(
            settings, f"{settings.application_id}-{process_id}", metrics
        )

        def exactly_once(member: GroupMemberView) -> CommitProtocol:
            def metadata() -> bytes:
                held = member.commit_generation
                if held is None:
                    raise RebalanceInProgress("the member holds no generation to commit in")
                generation, member_id = held
                return group_metadata(
                    settings.application_id, generation, member_id, settings.group_instance_id
                )

            return ExactlyOnceCommit(collector, transaction, metadata)

        return Guarantee(collector, exactly_once)
    plain = at_least_once_collector(settings)
    return Guarantee(plain, lambda member: AtLeastOnceCommit(plain, member, timeout))
