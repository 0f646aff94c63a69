"""What members tell the leader and what the leader tells them: versioned user-data formats.

Two encodings, told apart by their first byte:

* version 1: a JSON (orjson) object with a ``version`` field, the format of the first
  releases. Its assignments carry the whole group's host maps, so at a thousand members
  the group's metadata grew past Kafka's 1 MiB record limit (KAFKA-7149's problem).
* version 2: :data:`BINARY_MARKER`, the version as a varint, then the compact fields of
  :mod:`worker.assignment.compact`. An assignment carries only its member's tasks and
  the endpoint of the *directory*: the one member whose assignment also carries the
  group's routing map, which the others fetch from it when a query needs it
  (:mod:`worker.http.directory`).

A decoder accepts every version up to the one it knows and ignores fields it does not
know, so a later minor addition need not bump the version; a higher version raises
:class:`UnsupportedVersion` naming both versions.

Version negotiation (Kafka Streams' version probing, without its extra round). The
subscription carries ``latest_supported``. A member encodes its subscription in the
version of the last assignment it received, version 1 before any: every leader, old or
new, can read it. The leader answers every member in the lowest ``latest_supported`` of
the group, so while one old member remains everyone gets version 1 (with host maps) and
keeps subscribing in version 1, and an old member that becomes leader reads every
subscription. Once every member reads version 2, the leader sends version 2 and the
members' next subscriptions shrink too. A rollback works the same way down.

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

from worker.assignment import compact
from worker.assignment.task_id import TaskId
from worker.assignment.wire import Reader, Writer
from worker.errors import WorkerError

JSON_VERSION = 1
SUBSCRIPTION_VERSION = 2  # the latest this worker reads and writes
ASSIGNMENT_VERSION = 2
ROUTING_VERSION = 2  # the routing map a directory serves (``GET /routing``): binary only
# First byte of a binary encoding: not one a JSON text starts with (``{`` or blank).
BINARY_MARKER = 0xB7
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
    # The member is stopping (SIGTERM): the leader gives it nothing and moves its actives
    # to their new owners in this round, to be released like any hand-over
    # (worker/tasks/handover.py); it leaves the group once it has released them. A leader
    # that predates the flag ignores it and plans the member as any other.
    leaving: bool = False
    # The latest user-data version the member reads: decoded, never set when encoding
    # (a member always announces its own).
    latest_supported: int = SUBSCRIPTION_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_offset_sums", MappingProxyType(dict(self.task_offset_sums)))
        object.__setattr__(self, "pending_moves", MappingProxyType(dict(self.pending_moves)))
        object.__setattr__(self, "prev_active", _tasks(self.prev_active))
        object.__setattr__(self, "prev_standby", _tasks(self.prev_standby))

    @classmethod
    def empty(cls, process_id: str, endpoint: str = "") -> Subscription:
        """A member that reports no local state (also what an undecodable one counts as)."""
        return cls(process_id, endpoint, {}, frozenset(), frozenset())

    def encode(self, version: int = SUBSCRIPTION_VERSION) -> bytes:
        """Deterministic bytes in ``version`` (keys and tasks sorted: equal values encode
        equally); raises ValueError for a version this worker cannot write."""
        if version == SUBSCRIPTION_VERSION:
            out = _binary_envelope(version)
            out.uint(SUBSCRIPTION_VERSION)
            compact.write_subscription(out, self)
            return out.bytes()
        _check_json_version(version)
        return orjson.dumps(
            {
                "version": JSON_VERSION,
                "latest_supported": SUBSCRIPTION_VERSION,
                "process_id": self.process_id,
                "endpoint": self.endpoint,
                "offset_sums": {str(t): s for t, s in sorted(self.task_offset_sums.items())},
                "prev_active": _encode_tasks(self.prev_active),
                "prev_standby": _encode_tasks(self.prev_standby),
                "rebalance_requests": self.rebalance_requests,
                "pending_moves": _encode_moves(self.pending_moves),
                "leaving": self.leaving,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Subscription:
        """Parse a subscription; raise UnsupportedVersion or MalformedUserData."""
        if _is_binary(data):
            reader = _open_binary(data, "subscription", SUBSCRIPTION_VERSION)
            try:
                latest = reader.uint()
                return cls(**compact.read_subscription(reader), latest_supported=latest)
            except (TypeError, ValueError) as exc:
                raise MalformedUserData(f"subscription user data is malformed: {exc}") from exc
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
                leaving=obj.get("leaving") is True,
                latest_supported=_int(obj.get("latest_supported", JSON_VERSION)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedUserData(f"subscription user data is malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader decided for one member, plus where to find the group's routing map.

    ``active_hosts``/``standby_hosts`` map each instance's endpoint (host:port) to the
    tasks it hosts, for interactive-query routing (``standby_hosts`` includes warmups).
    In version 1 every assignment carries them; in version 2 only the directory's does,
    and ``directory`` names that member's endpoint in every assignment ("" in version 1,
    or when no member has an endpoint).
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
    # The two-phase moves under way that concern this member (task -> the client key it
    # goes to next round): those it is the target of, and those of tasks it owned.
    pending_moves: Mapping[TaskId, str] = field(default_factory=dict)
    directory: str = ""

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

    def encode(self, version: int = ASSIGNMENT_VERSION) -> bytes:
        """Deterministic bytes (sorted) in ``version``; ``generation`` is deliberately
        left out, and so is ``directory`` in version 1. Raises ValueError for a version
        this worker cannot write."""
        if version == ASSIGNMENT_VERSION:
            out = _binary_envelope(version)
            compact.write_assignment(out, self)
            return out.bytes()
        _check_json_version(version)
        return orjson.dumps(
            {
                "version": JSON_VERSION,
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
        if _is_binary(data):
            reader = _open_binary(data, "assignment", ASSIGNMENT_VERSION)
            try:
                return cls(**compact.read_assignment(reader), generation=generation)
            except (TypeError, ValueError) as exc:
                raise MalformedUserData(f"assignment user data is malformed: {exc}") from exc
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


def user_data_version(data: bytes) -> int:
    """The version ``data`` claims (1 for anything that is not binary); never raises."""
    if not _is_binary(data):
        return JSON_VERSION
    try:
        return Reader(data, 1).uint()
    except ValueError:
        return JSON_VERSION


def encode_routing(
    generation: int,
    active_hosts: Mapping[str, frozenset[TaskId]],
    standby_hosts: Mapping[str, frozenset[TaskId]],
) -> bytes:
    """The routing map of one generation, as a directory serves it."""
    out = _binary_envelope(ROUTING_VERSION)
    out.sint(generation)
    compact.write_hosts(out, active_hosts, standby_hosts)
    return out.bytes()


def decode_routing(
    data: bytes,
) -> tuple[int, Mapping[str, frozenset[TaskId]], Mapping[str, frozenset[TaskId]]]:
    """(generation, active hosts, standby hosts); raise UnsupportedVersion or MalformedUserData."""
    if not _is_binary(data):
        raise MalformedUserData("routing map is not in the binary format")
    reader = _open_binary(data, "routing map", ROUTING_VERSION)
    try:
        generation = reader.sint()
        active, standby = compact.read_hosts(reader)
    except (TypeError, ValueError) as exc:
        raise MalformedUserData(f"routing map is malformed: {exc}") from exc
    return generation, _hosts(active), _hosts(standby)


def _is_binary(data: bytes) -> bool:
    return data[:1] == bytes((BINARY_MARKER,))


def _binary_envelope(version: int) -> Writer:
    out = Writer()
    out.byte(BINARY_MARKER)
    out.uint(version)
    return out


def _open_binary(data: bytes, kind: str, supported: int) -> Reader:
    """A reader past the envelope, once its version is known to be readable here."""
    reader = Reader(data, 1)
    try:
        version = reader.uint()
    except ValueError as exc:
        raise MalformedUserData(f"{kind} user data has no valid version: {exc}") from exc
    if version > supported:
        raise UnsupportedVersion(kind, version, supported)
    if version <= JSON_VERSION:
        raise MalformedUserData(f"{kind} user data: version {version} is not a binary format")
    return reader


def _check_json_version(version: int) -> None:
    if version != JSON_VERSION:
        raise ValueError(f"cannot encode user data version {version}")


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
    if version != JSON_VERSION:
        raise MalformedUserData(f"{kind} user data: version {version} is not a JSON format")
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
