"""The names of the log events that something outside the emitting module reads.

The benchmarks, the demo's checks and the tests find what a worker did by these names in its
JSON log lines (``worker.starting`` marks a run, ``restore.done`` carries what a task
restored, ``assignment.applied`` the tasks a worker took). Each name is declared here once:
the emitting code logs the constant and every reader imports it, so renaming an event is one
edit that no reader can miss. Events nobody parses keep their literal at the call site.
"""

from __future__ import annotations

# the worker's run (runtime/worker.py, runtime/shutdown.py)
WORKER_STARTING = "worker.starting"
WORKER_STOPPED = "worker.stopped"
WORKER_SHUTDOWN_TIMEOUT = "worker.shutdown_timeout"
# start-up waiting for the broker (runtime/broker_wait.py)
BROKER_WAITING = "broker.waiting"  # a start-up step could not reach the broker; retried
BROKER_WAITED = "broker.waited"  # the step succeeded after waiting
# internal topics (kafka/repartition_topics.py): ones this topology no longer names (renames)
TOPICS_INTERNAL_UNUSED = "topics.internal_unused"
# repartition purging (kafka/repartition_purge.py): DeleteRecords refused by the broker
REPARTITION_PURGE_UNSUPPORTED = "repartition.purge_unsupported"
REPARTITION_PURGED = "repartition.purged"  # a DeleteRecords request succeeded

# group membership (kafka/membership.py, kafka/member_joins.py, kafka/task_assignor.py)
MEMBERSHIP_STARTED = "membership.started"
MEMBERSHIP_ASSIGN = "membership.assign"  # the leader computed the group's assignment
MEMBERSHIP_ASSIGNED = "membership.assigned"  # this member received its assignment
MEMBERSHIP_CLOSED = "membership.closed"
MEMBERSHIP_STALE_MEMBER_REMOVED = "membership.stale_member_removed"

# tasks (tasks/manager.py, tasks/task.py)
ASSIGNMENT_APPLIED = "assignment.applied"
INITIAL_STANDBYS_OPENED = "initial_standbys.opened"
INITIAL_STANDBY_RECYCLED = "initial_standby.recycled"
TASK_WIPED = "task.wiped"
# a symbolic link where a task directory belongs: left alone (state/directory.py)
STATE_SYMLINK_REFUSED = "state.symlink_refused"
TASK_CORRUPTED = "task.corrupted"
HANDOVER_RELEASED = "handover.released"  # the old owner released tasks in their changelogs
HANDOVER_TAKEN_OVER = "handover.taken_over"  # the new owner read a release and took over

# restoration (state/restore.py)
RESTORE_START = "restore.start"
STANDBY_START = "standby.start"
RESTORE_DONE = "restore.done"

# records (processing/handlers.py)
RECORD_SKIPPED = "record.skipped"
RECORD_LATE = "record.late"  # a windowed aggregation dropped a record (throttled)

# librdkafka's own log lines (kafka/client_logs.py)
LIBRDKAFKA_LOG = "librdkafka.log"


def transition_event(machine: str) -> str:
    """The event a :class:`worker.lifecycle.StateMachine` named ``machine`` logs on a move."""
    return f"{machine}.transition"


TASK_TRANSITION = transition_event("task")
CHANGELOG_TRANSITION = transition_event("changelog")
MEMBERSHIP_TRANSITION = transition_event("membership")
WORKER_TRANSITION = transition_event("worker")
