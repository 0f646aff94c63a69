"""What members tell the leader and what the leader tells them: versioned user-data formats.

Both formats are compact JSON (orjson) objects carrying a ``version`` field, versioned from
day one as the architecture asks. A decoder accepts every version up to the one it knows
and ignores fields it does not know, so a later minor addition need not bump the version;
a higher version raises :class:`UnsupportedVersion` naming both versions. The subscription
also carries ``latest_supported`` (Kafka Streams' ``latestSupportedVersion``) so a future
leader can pick a version every member understands (version probing).

Offset sums. ``task_offset_sums[task]`` is the sum, over the task's changelog partitions,
of the member's next position in each (stored offset + 1; 0 for a partition with no stored
offset), reported for EVERY task the member holds state for, running actives included.
Kafka Streams reports its running actives as ``LATEST_OFFSET`` (-2) instead
(reference/kafka-streams-state.md §4.2); real numbers let the leader rank every copy of a
task, and the leader needs no sentinel to know an active is caught up: it treats every
task in ``prev_active`` as lag 0 (:mod:`worker.assignment.lags`). ``prev_active`` lists the
tasks the member runs as active now, ``prev_standby`` those it holds as standby or
warmup. ``LATEST_OFFSET`` and ``UNKNOWN_OFFSET_SUM`` (-3) stay defined for compatibility:
a negative sum still decodes, and the leader counts it as no report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import orjson

from worker.assignment.task_id import TaskId
from worker.errors import WorkerError

SUBSCRIPTION_VERSION = 1
ASSIGNMENT_VERSION = 1
LATEST_OFFSET = -2
UNKNOWN_OFFSET_SUM = -3
NO_PROBE = -1


class UserDataError(WorkerError):
    """Group user data (subscription or assignment) could not be decoded."""


class UnsupportedVersion(UserDataError):
    """The user data was written by a newer worker with a format this one does not know."""

    def __init__(self, kind: str, version: int, supported: int) -> None:
        super().__init__(
            f"{kind} user data has version {version}, this worker understands up to "
            f"version {supported}: upgrade this worker (or roll back the newer one)"
        )
        self.kind = kind
        self.version = version
        self.supported = supported


class MalformedUserData(UserDataError):
    """The user data is not a valid encoding of any known version."""


def _tasks(values: Iterable[TaskId]) -> frozenset[TaskId]:
    return values if isinstance(values, frozenset) else frozenset(values)


def _hosts(hosts: Mapping[str, Iterable[TaskId]]) -> Mapping[str, frozenset[TaskId]]:
    return MappingProxyType({host: _tasks(tasks) for host, tasks in hosts.items()})


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's report at each join: who it is and what local state it holds.

    ``task_offset_sums`` maps a task to the sum of the member's next positions in its
    changelogs (see the module doc). Collections are frozen on construction.
    """

    process_id: str
    endpoint: str
    task_offset_sums: Mapping[TaskId, int]
    prev_active: frozenset[TaskId]
    prev_standby: frozenset[TaskId]
    # How many rebalances this member has asked for. A member that wants the group to
    # rebalance bumps it, so its rejoin carries new metadata, which brokers answer with a
    # rebalance (Kafka Streams' ``uniqueField``); nothing else reads it.
    rebalance_requests: int = 0
    # The two-phase moves of the latest assignment this member received (task -> the
    # client key it goes to), echoed so that whichever member leads the follow-up round
    # finishes them as planned, even when the previous leader is gone.
    pending_moves: Mapping[TaskId, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_offset_sums", MappingProxyType(dict(self.task_offset_sums)))
        object.__setattr__(self, "pending_moves", MappingProxyType(dict(self.pending_moves)))
        object.__setattr__(self, "prev_active", _tasks(self.prev_active))
        object.__setattr__(self, "prev_standby", _tasks(self.prev_standby))

    @classmethod
    def empty(cls, process_id: str, endpoint: str = "") -> Subscription:
        """A member that reports no local state (also what an undecodable one counts as)."""
        return cls(process_id, endpoint, {}, frozenset(), frozenset())

    def encode(self) -> bytes:
        """Deterministic bytes: keys and task lists sorted, so equal values encode equally."""
        return orjson.dumps(
            {
                "version": SUBSCRIPTION_VERSION,
                "latest_supported": SUBSCRIPTION_VERSION,
                "process_id": self.process_id,
                "endpoint": self.endpoint,
                "offset_sums": {str(t): s for t, s in sorted(self.task_offset_sums.items())},
                "prev_active": _encode_tasks(self.prev_active),
                "prev_standby": _encode_tasks(self.prev_standby),
                "rebalance_requests": self.rebalance_requests,
                "pending_moves": _encode_moves(self.pending_moves),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Subscription:
        """Parse a subscription; raise UnsupportedVersion or MalformedUserData."""
        obj = _load(data, "subscription", SUBSCRIPTION_VERSION)
        try:
            sums = obj.get("offset_sums", {})
            if not isinstance(sums, dict):
                raise TypeError("offset_sums is not an object")
            return cls(
                process_id=_str(obj["process_id"]),
                endpoint=_str(obj.get("endpoint", "")),
                task_offset_sums={TaskId.parse(t): _int(s) for t, s in sums.items()},
                prev_active=_decode_tasks(obj.get("prev_active", [])),
                prev_standby=_decode_tasks(obj.get("prev_standby", [])),
                rebalance_requests=_int(obj.get("rebalance_requests", 0)),
                pending_moves=_decode_moves(obj.get("pending_moves", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedUserData(f"subscription user data is malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader decided for one member, plus routing metadata for the whole group.

    ``active_hosts``/``standby_hosts`` map each instance's endpoint (host:port) to the
    tasks it hosts, for interactive-query routing (``standby_hosts`` includes warmups);
    ``warmup`` holds standbys placed where the leader wants the active once they have
    caught up. ``next_probe_ms`` is the wall-clock time (ms) at which this member should
    ask for a probing rebalance, ``NO_PROBE`` (-1) for none; the leader sets it on exactly
    one member per group. ``generation`` is the group generation the assignment belongs
    to; it is filled in by the member that receives it and never encoded (the broker
    already says which generation it is).
    """

    active: frozenset[TaskId]
    standby: frozenset[TaskId]
    warmup: frozenset[TaskId]
    active_hosts: Mapping[str, frozenset[TaskId]]
    standby_hosts: Mapping[str, frozenset[TaskId]]
    next_probe_ms: int = NO_PROBE
    generation: int = -1
    # The group's two-phase moves under way (task -> the client key it goes to next round).
    pending_moves: Mapping[TaskId, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pending_moves", MappingProxyType(dict(self.pending_moves)))
        object.__setattr__(self, "active", _tasks(self.active))
        object.__setattr__(self, "standby", _tasks(self.standby))
        object.__setattr__(self, "warmup", _tasks(self.warmup))
        object.__setattr__(self, "active_hosts", _hosts(self.active_hosts))
        object.__setattr__(self, "standby_hosts", _hosts(self.standby_hosts))

    @classmethod
    def empty(cls, generation: int = -1) -> Assignment:
        """No tasks at all: the state before the first assignment."""
        return cls(frozenset(), frozenset(), frozenset(), {}, {}, NO_PROBE, generation)

    def with_generation(self, generation: int) -> Assignment:
        return replace(self, generation=generation)

    def encode(self) -> bytes:
        """Deterministic bytes (sorted); ``generation`` is deliberately left out."""
        return orjson.dumps(
            {
                "version": ASSIGNMENT_VERSION,
                "active": _encode_tasks(self.active),
                "standby": _encode_tasks(self.standby),
                "warmup": _encode_tasks(self.warmup),
                "active_hosts": _encode_hosts(self.active_hosts),
                "standby_hosts": _encode_hosts(self.standby_hosts),
                "next_probe_ms": self.next_probe_ms,
                "pending_moves": _encode_moves(self.pending_moves),
            }
        )

    @classmethod
    def decode(cls, data: bytes, generation: int = -1) -> Assignment:
        """Parse an assignment; raise UnsupportedVersion or MalformedUserData."""
        obj = _load(data, "assignment", ASSIGNMENT_VERSION)
        try:
            return cls(
                active=_decode_tasks(obj.get("active", [])),
                standby=_decode_tasks(obj.get("standby", [])),
                warmup=_decode_tasks(obj.get("warmup", [])),
                active_hosts=_decode_hosts(obj.get("active_hosts", {})),
                standby_hosts=_decode_hosts(obj.get("standby_hosts", {})),
                next_probe_ms=_int(obj.get("next_probe_ms", NO_PROBE)),
                generation=generation,
                pending_moves=_decode_moves(obj.get("pending_moves", {})),
            )
        except (TypeError, ValueError) as exc:
            raise MalformedUserData(f"assignment user data is malformed: {exc}") from exc


def _load(data: bytes, kind: str, supported: int) -> dict[str, Any]:
    """Parse the JSON envelope and check its version before anything else."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedUserData(f"{kind} user data is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise MalformedUserData(f"{kind} user data is not a JSON object")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise MalformedUserData(f"{kind} user data has no valid version field: {version!r}")
    if version > supported:
        raise UnsupportedVersion(kind, version, supported)
    return obj


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _encode_tasks(tasks: Iterable[TaskId]) -> list[str]:
    return [str(t) for t in sorted(tasks)]


def _decode_tasks(values: object) -> frozenset[TaskId]:
    if not isinstance(values, list):
        raise TypeError(f"expected a list of task ids, got {values!r}")
    return frozenset(TaskId.parse(_str(v)) for v in values)


def _encode_hosts(hosts: Mapping[str, frozenset[TaskId]]) -> dict[str, list[str]]:
    return {host: _encode_tasks(tasks) for host, tasks in sorted(hosts.items())}


def _decode_hosts(values: object) -> dict[str, frozenset[TaskId]]:
    if not isinstance(values, dict):
        raise TypeError(f"expected an object of host -> task ids, got {values!r}")
    return {_str(host): _decode_tasks(tasks) for host, tasks in values.items()}


def _encode_moves(moves: Mapping[TaskId, str]) -> dict[str, str]:
    return {str(task): key for task, key in sorted(moves.items())}


def _decode_moves(values: object) -> dict[TaskId, str]:
    if not isinstance(values, dict):
        raise TypeError(f"expected an object of task id -> client, got {values!r}")
    return {TaskId.parse(_str(task)): _str(key) for task, key in values.items()}
