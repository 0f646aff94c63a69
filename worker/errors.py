"""The error taxonomy, classified by what the caller must do.

Every error the worker raises on purpose derives from :class:`WorkerError`. The classes
say what to do next, not what went wrong: a corrupted task is wiped and restored, a
locked directory is retried, a config error stops the process before anything starts.
Third-party errors (rocksdict, librdkafka, kafka-python) are mapped onto these in the
adapter that calls the library, never by matching text elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable


class WorkerError(Exception):
    """Root of every error the worker raises deliberately."""


class ConfigError(WorkerError):
    """A setting is missing or invalid. Fatal before start-up; exit code 2.

    ``key`` names the offending setting so the operator can fix it from the message alone.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config error: {key}: {message}")
        self.key = key
        self.message = message


class BrokerAccessDenied(ConfigError):
    """The broker refused this worker's credentials (SASL, TLS) or its permissions
    (ACLs): fix the ``kafka.*`` settings or the broker's ACLs. Waiting cures nothing, so
    it is not retried like an unreachable broker; exit code 2, with librdkafka's reason."""

    def __init__(self, reason: str) -> None:
        super().__init__("kafka", f"the broker refused access (SASL, TLS or ACLs): {reason}")


class TopologyError(WorkerError):
    """The user's topology is malformed or does not match the topics (fatal)."""


class StateDirError(WorkerError):
    """The state directory cannot be used (permissions, not a directory). Fatal."""


class UnsafeStatePath(StateDirError):
    """A delete would leave the state directory (a symbolic link, a path outside it).

    Nothing was deleted. Fatal where the worker needs the path; the cleaner and the
    start-up scan skip it and log ``state.symlink_refused``. Remove the link by hand.
    """


class StateLocked(WorkerError):
    """Another process (or task) holds a lock we need.

    For the process lock this is fatal (a second worker on the same state dir); for a
    task lock the caller retries later.
    """


class TaskCorrupted(WorkerError):
    """Local state of these tasks cannot be trusted: wipe it and restore from the changelog."""

    def __init__(self, task_ids: Iterable[object], reason: str) -> None:
        self.task_ids = frozenset(task_ids)
        self.reason = reason
        super().__init__(f"tasks {sorted(map(str, self.task_ids))} corrupted: {reason}")


class StoreCorrupted(WorkerError):
    """One store could not be opened or read. The owning task turns it into TaskCorrupted."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"store {path} corrupted: {reason}")
        self.path = path
        self.reason = reason


class TaskMigrated(WorkerError):
    """We lost ownership (group generation moved on / fenced): close dirty and rejoin."""


class RebalanceInProgress(WorkerError):
    """The group is rebalancing: a commit that needs the generation waits for it to end.

    Nothing is lost and every task is still owned; processing goes on and the commit is
    retried once the member is stable again (cooperative rebalancing, KIP-429).
    """


class KafkaUnavailable(WorkerError):
    """The broker could not be reached in time. Retriable: keep the task, try again."""


class OutputFailed(WorkerError):
    """What this worker sent since its last commit may be lost or aborted: drop the
    uncommitted work of every running task and process it again from the last commit.
    Not the record's fault, so no record policy applies."""


class ProduceFailed(OutputFailed):
    """A record was not acknowledged; the commit that depends on it must not happen."""


class TransactionAborted(OutputFailed):
    """The transaction did not commit and its records are aborted; the producer lives on."""


class GenerationMoved(TransactionAborted):
    """The group refused the transaction's offsets: the generation they named is over
    (the JoinGroup round ended before they arrived). Its records are aborted; revive the
    tasks in it and commit again with the new generation. Only the group moved on: the
    tasks are still ours unless the new assignment says otherwise."""


class ProducerFenced(TransactionAborted):
    """As TransactionAborted, and the producer is dead (another instance took its
    transactional.id, or its epoch or generation is stale): it is replaced."""


class FatalError(WorkerError):
    """Nothing sensible can be done; the worker stops with a non-zero exit."""
