"""Interactive queries over windowed stores: ``/stores/{store}/windows`` and ``/sessions``.

``GET /stores/{store}/windows?key=&from=&to=&limit=&partition=&allow_stale=``
    windows of a window store (``Topology.add_window_store``) starting in ``[from, to]``
    (ms, both included; default the whole time line), by start then key;
``GET /stores/{store}/sessions?key=&from=&to=&limit=&allow_stale=``
    ``key``'s sessions of a session store ending at or after ``from`` and starting at or
    before ``to``, by end (``key`` required).

Committed data only, read under the store's close lock (``window_stores.py``'s
``committed_*``), and never a window past ``observed - retention`` even while it is
still on disk (KAFKA-12960). Keys are written as in key queries (``worker/http/keys.py``).

Routing follows the other queries (``queries.py``, ``ranges``-style per partition):

- with ``key``: the key's owner, exactly like ``/stores/{store}/keys/{key}`` (read here,
  a local copy with ``allow_stale=true``, a 307 to the instance hosting it, or a 503);
- windows without ``key`` and with ``partition=N``: that partition's task, routed the
  same way; without either: every partition whose active runs here, merged by start then
  key, the others named in ``elsewhere`` (partition -> endpoint or null) and
  ``complete`` false while any is elsewhere.

Each answer carries the store's committed ``observed_ms`` (an int for one partition, a
map by partition when merged), ``stale`` (true when a standby or restoring copy
answered, with its ``lag``), ``limit`` and ``more``. ``limit``: :data:`DEFAULT_LIMIT` when
absent, at most :data:`MAX_LIMIT`. A bad time, ``from > to``, a bad key or limit, or a
store of the other kind is a 400 naming the problem.

Thread-safety: as ``queries.py``.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.assignment.task_id import TaskId
from worker.clock import MAX_TIME_MS
from worker.http.keys import BadKey, key_bytes, render_key, render_value
from worker.http.queries import TASK_HEADER, QueryRouter, Reply, store_of, unavailable
from worker.http.ranges import DEFAULT_LIMIT, MAX_LIMIT, BadRequest, answer_parsed, flag
from worker.http.targets import echo
from worker.processing.built_topology import StoreSpec, Subtopology
from worker.processing.join_windows import JoinWindows
from worker.processing.windows import SessionWindows, SlidingWindows
from worker.runtime.status import Status, TaskStatus
from worker.serde import SerdeError
from worker.state.contracts import StoredWindow
from worker.state.scan import check_limit
from worker.state.store import StoreClosedError
from worker.state.window_stores import FixedWindowStore, SessionStore

PARAMETERS = {
    "windows": frozenset({"key", "from", "to", "limit", "partition", "allow_stale"}),
    "sessions": frozenset({"key", "from", "to", "limit", "allow_stale"}),
}

Found = tuple[int, list[StoredWindow]]


@dataclass(frozen=True)
class WindowQuery:
    """One windows or sessions request, parsed and checked."""

    store: str
    kind: str  # "windows" | "sessions"
    spec: StoreSpec
    subtopology: Subtopology
    key: bytes | None
    from_ms: int
    to_ms: int
    limit: int
    partition: int | None
    allow_stale: bool
    path: str


class WindowQueries:
    """Answers window and session queries from the router's status snapshot."""

    def __init__(self, router: QueryRouter) -> None:
        self._router = router

    def get(self, store: str, kind: str, params: Mapping[str, str], path: str) -> Reply:
        """Answer ``GET /stores/{store}/{kind}`` (windows or sessions); ``params`` are the
        query parameters (the last of each), ``path`` the raw path and query."""
        return answer_parsed(
            self._router,
            store,
            kind,
            lambda subtopology, spec: parse(store, kind, spec, subtopology, params, path),
            self._answer,
        )

    def _answer(self, query: WindowQuery, status: Status) -> Reply | None:
        tasks = status.routing.partitions.get(query.subtopology.id)
        if not tasks:
            return unavailable(query, "the number of tasks is not known yet (starting)")
        read = functools.partial(_read_one, query)
        if query.key is not None:
            owner = self._router.owner(query.store, query.key, status)
            assert owner is not None
            return self._router.route(query, owner, status, read)
        if query.partition is not None:
            if query.partition >= tasks:
                return Reply(400, {"error": f"partition {query.partition} >= {tasks} partitions"})
            task_id = TaskId(query.subtopology.id, query.partition)
            return self._router.route(query, task_id, status, read)
        here, elsewhere = self._router.split_partitions(query.subtopology, tasks, status)
        return _read_merged(query, here, elsewhere)


def parse(
    store: str,
    kind: str,
    spec: StoreSpec,
    subtopology: Subtopology,
    params: Mapping[str, str],
    path: str,
) -> WindowQuery:
    """The checked request. Raises BadRequest or ScanRangeError (both a 400)."""
    sessions = isinstance(spec.windows, SessionWindows | SlidingWindows)  # same shape
    if isinstance(spec.windows, JoinWindows):
        raise BadRequest(f"{store!r} is a stream-stream join's buffer: not queryable")
    if spec.windows is None or sessions != (kind == "sessions"):
        other = "sessions" if kind == "windows" else "windows"
        what = "a key-value store" if spec.windows is None else f"a {other} store"
        raise BadRequest(f"{store!r} is {what}: /{kind} reads {kind} stores")
    unknown = sorted(set(params) - PARAMETERS[kind])
    if unknown:
        raise BadRequest(f"unknown query parameters {', '.join(echo(n) for n in unknown[:3])}")
    key = None
    if params.get("key") is not None:
        try:
            key = key_bytes(spec.key_serde, params["key"])
        except BadKey as exc:
            raise BadRequest(f"bad key= : {exc}") from None
    elif sessions:
        raise BadRequest("key= is required for sessions")
    from_ms = _int(params, "from", 0)
    to_ms = _int(params, "to", MAX_TIME_MS)
    if from_ms < 0 or to_ms < 0:
        raise BadRequest(f"times must be >= 0, got from={from_ms} to={to_ms}")
    if from_ms > to_ms:
        raise BadRequest(f"from={from_ms} is after to={to_ms}")
    limit = check_limit(_int(params, "limit", DEFAULT_LIMIT), MAX_LIMIT)
    assert limit is not None
    partition = params.get("partition")
    number = None if partition is None else _int(params, "partition", 0)
    if number is not None and number < 0:
        raise BadRequest(f"partition must be >= 0, got {number}")
    stale = flag(params, "allow_stale")
    return WindowQuery(
        store, kind, spec, subtopology, key, from_ms, to_ms, limit, number, stale, path
    )


def _int(params: Mapping[str, str], name: str, default: int) -> int:
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {echo(text)}") from None


def _windows(query: WindowQuery, local: TaskStatus) -> Found | None:
    """``(observed, up to limit + 1 windows)`` of the local task's store; None if closed."""
    view = store_of(local, query.store)
    if view is None:
        return None
    store = view.store
    try:
        if isinstance(store, SessionStore) and query.key is not None:
            return store.committed_sessions(query.key, query.from_ms, query.to_ms, query.limit + 1)
        if isinstance(store, FixedWindowStore):
            return store.committed_windows(query.key, query.from_ms, query.to_ms, query.limit + 1)
    except StoreClosedError:
        return None
    return None


def _read_one(query: WindowQuery, task_id: TaskId, local: TaskStatus, stale: bool) -> Reply | None:
    found = _windows(query, local)
    if found is None:
        return None
    observed, windows = found
    body: dict[str, Any] = {"observed_ms": observed, "stale": stale, "task": str(task_id)}
    if stale:
        body["lag"] = local.lag
    if query.key is None:
        body.update(partitions=[task_id.partition], elsewhere={}, complete=True)
    return _render(query, windows, body, {TASK_HEADER: str(task_id)})


def _read_merged(
    query: WindowQuery, here: list[tuple[TaskId, TaskStatus]], elsewhere: dict[str, str | None]
) -> Reply | None:
    observed: dict[str, int] = {}
    lists: list[list[StoredWindow]] = []
    for task_id, local in here:
        found = _windows(query, local)
        if found is None:
            return None
        observed[str(task_id.partition)] = found[0]
        lists.append(found[1])
    merged = list(heapq.merge(*lists, key=lambda w: (w.start_ms, w.key)))
    body: dict[str, Any] = {
        "observed_ms": observed,
        "stale": False,
        "partitions": [task_id.partition for task_id, _ in here],
        "elsewhere": elsewhere,
        "complete": not elsewhere,
    }
    return _render(query, merged[: query.limit + 1], body, {})


def _render(
    query: WindowQuery, windows: list[StoredWindow], body: dict[str, Any], headers: dict[str, str]
) -> Reply:
    items = []
    for window in windows[: query.limit]:
        try:
            value, encoding = render_value(query.spec.value_serde, window.value)
        except SerdeError as exc:
            return Reply(500, {"error": f"stored value does not decode: {exc}"}, headers)
        item = {
            "key": render_key(query.spec.key_serde, window.key),
            "start": window.start_ms,
            "end": window.end_ms,
            "value": value,
        }
        if encoding != "json":
            item["encoding"] = encoding
        items.append(item)
    reply = {"store": query.store, query.kind: items, "limit": query.limit, **body}
    reply["more"] = len(windows) > query.limit
    return Reply(200, reply, headers)
