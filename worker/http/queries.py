"""Interactive queries and ``/tasks``, answered from the published status snapshot.

:class:`QueryRouter` is read-only. Everything it knows comes from two things the runtime
hands it: the topology (stores, their serdes, their sub-topologies) and a callable
returning the latest :class:`~worker.runtime.status.Status`, which the processing thread
publishes. From the snapshot it takes the local tasks (kind, state, stores, offsets,
lag, unavailable seconds by cause), the latest assignment's host maps (from the group's
directory when the assignment named one instead: :mod:`worker.http.directory`), this
instance's endpoint and the number of tasks per sub-topology. It never touches the task manager:
the only live objects it uses are stores, through ``Store.get_committed``, which is safe
against the processing thread closing the store at any moment (it raises
``StoreClosedError`` then).

``GET /stores/{store}/keys/{key}[?allow_stale=true]``, in order:

1. unknown store -> 404; key text the store's key serde cannot take -> 400
   (:mod:`worker.http.keys`);
2. the owning task: murmur2 of the key bytes over the sub-topology's task count, the
   partition a producer would pick, so the task whose store holds the key;
3. that task is a running active here -> read its store: 200 with the committed
   value, 404 when the key is absent;
4. ``allow_stale=true`` and a copy of the task is open here (standby, warmup, initial
   standby, or an active still restoring) -> read that copy; the reply carries
   ``X-Worker-Standby-Lag`` (records behind the changelog, or ``unknown``);
5. the latest assignment puts the task's active on another instance -> 307 to the same
   path and query on that instance's endpoint (``Location``, ``X-Worker-Endpoint``);
   with ``allow_stale=true`` and no active known, to an instance with a standby. The
   server adds a hop marker to the path, and a request that arrived with one is never
   redirected again (:mod:`worker.http.targets`);
6. otherwise (no assignment yet, rebalancing, the active here is restoring) -> 503 with
   ``Retry-After``.

A store closed between taking the snapshot and reading it (the task was closed or
moved) is retried once against a newer snapshot; if that does not help, 503.

Thread-safety: every method may be called from any number of threads at once; each
request reads one snapshot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.assignment.model import encode_routing
from worker.assignment.task_id import TaskId
from worker.endpoint import BadEndpoint, parse_endpoint
from worker.http.directory import RoutingDirectory
from worker.http.keys import BadKey, key_bytes, render_key, render_value
from worker.partitioner import partition_for
from worker.processing.built_topology import BuiltTopology, StoreSpec, Subtopology
from worker.runtime.status import Routing, Status, StoreStatus, TaskStatus
from worker.serde import SerdeError
from worker.state.store import StoreClosedError

RETRY_AFTER_SECONDS = "1"
LAG_HEADER = "X-Worker-Standby-Lag"
TASK_HEADER = "X-Worker-Task"
SERVED_BY_HEADER = "X-Worker-Served-By"
ENDPOINT_HEADER = "X-Worker-Endpoint"


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status code, a JSON-ready body (or bytes, sent as they are) and
    extra headers."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Query:
    """One key lookup (``redirect`` and ``unavailable`` need its ``store`` and ``path``)."""

    store: str
    spec: StoreSpec
    subtopology: Subtopology
    key: bytes
    key_text: str
    allow_stale: bool
    path: str  # the request's raw path and query, reused for redirects


class Routed(Protocol):
    """What routing needs of a request: its store, its raw path (for a redirect) and
    whether a local copy may answer (``allow_stale``)."""

    @property
    def store(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def allow_stale(self) -> bool: ...


class GlobalRead(Protocol):
    """A global table's store as a query reads it (``Store.get_committed``: any thread)."""

    def get_committed(self, key: bytes) -> bytes | None: ...


Read = Callable[[TaskId, TaskStatus, bool], "Reply | None"]
"""Answers from a local copy of a task: (task, its status, stale?) -> reply, None if closed."""


class QueryRouter:
    """Answers key lookups and ``/tasks`` from the status snapshot (see the module doc)."""

    def __init__(
        self,
        topology: BuiltTopology,
        status: Callable[[], Status],
        directory: RoutingDirectory | None = None,
        scheme: str = "http",
        global_stores: Mapping[str, GlobalRead] | None = None,
    ) -> None:
        """``global_stores``: the worker's global tables by name once they are open (a
        mapping it fills at start; until then a lookup answers 503)."""
        self._status = status
        self._scheme = scheme  # of redirects: the group's members share their TLS settings
        self._directory = directory if directory is not None else RoutingDirectory()
        self._stores: dict[str, tuple[Subtopology, StoreSpec]] = {
            spec.name: (st, spec) for st in topology.subtopologies for spec in st.stores
        }
        self._globals = {spec.name: spec for spec in topology.global_tables}
        self._global_stores: Mapping[str, GlobalRead] = (
            {} if global_stores is None else global_stores
        )

    @property
    def store_names(self) -> list[str]:
        return sorted([*self._stores, *self._globals])

    def find(self, store: str) -> tuple[Subtopology, StoreSpec] | None:
        """The sub-topology and spec of ``store``; None for an unknown store."""
        return self._stores.get(store)

    def snapshot(self) -> Status:
        """The latest published status."""
        return self._status()

    def owner(self, store: str, key: bytes, status: Status | None = None) -> TaskId | None:
        """The task whose ``store`` holds ``key``; None until the task count is known.

        Raises KeyError for an unknown store.
        """
        subtopology, _spec = self._stores[store]
        snapshot = status or self._status()
        tasks = snapshot.routing.partitions.get(subtopology.id)
        if not tasks:
            return None
        return TaskId(subtopology.id, partition_for(key, tasks))

    # -- GET /stores/{store}/keys/{key} ----------------------------------------------

    def get(self, store: str, key_text: str, allow_stale: bool, path: str) -> Reply:
        """Answer one key lookup; ``path`` is the raw request path and query."""
        if store in self._globals:
            return self._global_get(store, key_text)
        found = self._stores.get(store)
        if found is None:
            return Reply(404, {"error": f"unknown store {store!r}", "stores": self.store_names})
        subtopology, spec = found
        try:
            key = key_bytes(spec.key_serde, key_text)
        except BadKey as exc:
            return Reply(400, {"error": f"bad key for store {store!r}: {exc}", "store": store})
        query = _Query(store, spec, subtopology, key, key_text, allow_stale, path)
        return self.answer_retrying(query, functools.partial(self._answer, query))

    def _global_get(self, store: str, key_text: str) -> Reply:
        """A global table answers from this instance's copy, which holds every key: no
        routing, no redirect (``worker/runtime/global_tables.py``)."""
        spec = self._globals[store]
        try:
            key = key_bytes(spec.key_serde, key_text)
        except BadKey as exc:
            return Reply(400, {"error": f"bad key for store {store!r}: {exc}", "store": store})
        body: dict[str, Any] = {"store": store, "key": render_key(spec.key_serde, key)}
        body["kind"] = "global"
        local = self._global_stores.get(store)
        try:
            data = None if local is None else local.get_committed(key)
        except StoreClosedError:
            local = None
        if local is None:
            return Reply(
                503, {"error": "the global table is not open (starting or stopping)", **body}
            )
        if data is None:
            return Reply(404, {"error": "key not found", **body})
        try:
            value, encoding = render_value(spec.value_serde, data)
        except SerdeError as exc:
            return Reply(500, {"error": f"stored value does not decode: {exc}", **body})
        body["value"] = value
        if encoding != "json":
            body["encoding"] = encoding
        return Reply(200, body)

    def answer_retrying(self, query: Routed, answer: Callable[[Status], Reply | None]) -> Reply:
        """``answer`` on the latest snapshot; None (a store closed under us) earns one more
        try on a newer snapshot, then a 503. Shared by key, range and window queries so
        the one-retry rule of the module doc lives in one place."""
        status = self._status()
        reply = answer(status)
        if reply is None:
            newer = self._status()
            reply = answer(newer) if newer is not status else None
        return reply or unavailable(query, "the store was closed (task closing or moving)")

    def _answer(self, query: _Query, status: Status) -> Reply | None:
        """Steps 2-6 of the module doc on one snapshot; None if the store was closed."""
        task_id = self.owner(query.store, query.key, status)
        if task_id is None:
            return unavailable(query, "the number of tasks is not known yet (starting)")
        return self.route(query, task_id, status, functools.partial(_read, query))

    def route(self, query: Routed, task_id: TaskId, status: Status, read: Read) -> Reply | None:
        """Steps 3-6 of the module doc for the task ``task_id`` (a key's owner, or a
        partition a range query asks for); ``read`` answers from a local copy, None if it
        closed."""
        local = status.task(task_id)
        if local is not None and local.kind == "active" and local.state == "running":
            return read(task_id, local, False)
        if query.allow_stale and local is not None and store_of(local, query.store):
            return read(task_id, local, True)
        routing = self.routing(status)
        target = routing.active_host(task_id)
        if target is None and query.allow_stale:
            target = next(
                (h for h in routing.standby_hosts_of(task_id) if h != routing.endpoint), None
            )
        if target is not None and target != routing.endpoint:
            if not _is_endpoint(target):  # a member this version's parser would refuse
                return unavailable(query, "its instance advertises no valid host:port", task_id)
            return redirect(query, task_id, target, self._scheme)
        if local is not None:
            why = f"task {task_id} is {local.kind} and {local.state} here"
        elif target == routing.endpoint:
            why = f"task {task_id} was just assigned here and is not open yet"
        elif not routing.active_hosts and routing.directory:
            why = f"the routing map of generation {routing.generation} is not available yet"
        else:
            why = f"no instance hosts task {task_id} yet (state {status.state.value})"
        return unavailable(query, why, task_id)

    def routing(self, status: Status) -> Routing:
        """The snapshot's routing, its host maps fetched from the directory when needed."""
        return self._directory.resolve(status.routing)

    def split_partitions(
        self, subtopology: Subtopology, tasks: int, status: Status
    ) -> tuple[list[tuple[TaskId, TaskStatus]], dict[str, str | None]]:
        """The sub-topology's tasks whose active runs here, and the others' active hosts
        by partition (None when unassigned). Range and window queries without a
        partition answer from the first and name the second in ``elsewhere``."""
        here: list[tuple[TaskId, TaskStatus]] = []
        away: list[TaskId] = []
        for partition in range(tasks):
            task_id = TaskId(subtopology.id, partition)
            local = status.task(task_id)
            if local is not None and local.kind == "active" and local.state == "running":
                here.append((task_id, local))
            else:
                away.append(task_id)
        routing = self.routing(status) if away else status.routing
        return here, {str(t.partition): routing.active_host(t) for t in away}

    # -- GET /tasks ------------------------------------------------------------------

    def tasks(self) -> Reply:
        """This instance's tasks, and the latest assignment's routing metadata."""
        status = self._status()
        routing = self._directory.resolve(status.routing)
        return Reply(
            200,
            {
                "endpoint": routing.endpoint,
                "state": status.state.value,
                "generation": routing.generation,
                "directory": routing.directory,
                "tasks": [_task_json(t) for t in status.tasks],
                "active_hosts": _hosts_json(routing.active_hosts),
                "standby_hosts": _hosts_json(routing.standby_hosts),
            },
        )

    # -- GET /routing ----------------------------------------------------------------

    def routing_map(self) -> Reply:
        """The group's routing map in the compact binary format, when this instance holds
        it (it is the directory, or the group runs user data version 1); else 404."""
        routing = self._status().routing
        if not (routing.active_hosts or routing.standby_hosts):
            return Reply(
                404,
                {"error": "no routing map here", "directory": routing.directory},
            )
        return Reply(
            200, encode_routing(routing.generation, routing.active_hosts, routing.standby_hosts)
        )


def store_of(task: TaskStatus, name: str) -> StoreStatus | None:
    return next((s for s in task.stores if s.name == name and s.store is not None), None)


def _read(query: _Query, task_id: TaskId, local: TaskStatus, stale: bool) -> Reply | None:
    view = store_of(local, query.store)
    if view is None:
        return None  # an active without its stores: closing; retried on a newer snapshot
    try:
        data = view.store.get_committed(query.key)
    except StoreClosedError:
        return None
    headers = {TASK_HEADER: str(task_id), SERVED_BY_HEADER: local.kind}
    if stale:
        headers[LAG_HEADER] = "unknown" if local.lag is None else str(local.lag)
    body: dict[str, Any] = {
        "store": query.store,
        "key": render_key(query.spec.key_serde, query.key),
        "task": str(task_id),
        "kind": local.kind,
    }
    if stale:
        body["lag"] = local.lag
    if data is None:
        return Reply(404, {"error": "key not found", **body}, headers)
    try:
        value, encoding = render_value(query.spec.value_serde, data)
    except SerdeError as exc:
        return Reply(500, {"error": f"stored value does not decode: {exc}", **body}, headers)
    body["value"] = value
    if encoding != "json":
        body["encoding"] = encoding
    return Reply(200, body, headers)


def _is_endpoint(text: str) -> bool:
    """True when ``text`` may become a URL authority: an older member, or anything else
    that joined the group, may advertise what ``application.server`` refuses here (a
    path, userinfo, a line break that would split the ``Location`` header)."""
    try:
        parse_endpoint(text)
    except BadEndpoint:
        return False
    return True


def redirect(query: Routed, task_id: TaskId, endpoint: str, scheme: str = "http") -> Reply:
    location = f"{scheme}://{endpoint}{query.path}"
    return Reply(
        307,
        {
            "redirect": location,
            "endpoint": endpoint,
            "task": str(task_id),
            "store": query.store,
        },
        {"Location": location, ENDPOINT_HEADER: endpoint, TASK_HEADER: str(task_id)},
    )


def unavailable(query: Routed, why: str, task_id: TaskId | None = None) -> Reply:
    body: dict[str, Any] = {"error": f"not available now: {why}; retry", "store": query.store}
    headers = {"Retry-After": RETRY_AFTER_SECONDS}
    if task_id is not None:
        body["task"] = str(task_id)
        headers[TASK_HEADER] = str(task_id)
    return Reply(503, body, headers)


def _task_json(task: TaskStatus) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "kind": task.kind,
        "state": task.state,
        "lag": task.lag,
        "unavailable_seconds": {
            cause: round(seconds, 3) for cause, seconds in sorted(task.unavailable_seconds.items())
        },
        "stores": [
            {"name": s.name, "changelog": s.changelog, "partition": s.partition, "offset": s.offset}
            for s in task.stores
        ],
    }


def _hosts_json(hosts: Mapping[str, frozenset[TaskId]]) -> dict[str, list[str]]:
    return {endpoint: sorted(map(str, tasks)) for endpoint, tasks in sorted(hosts.items())}
