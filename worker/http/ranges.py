"""Range and prefix interactive queries: ``GET /stores/{store}/range`` and ``/prefix``.

``GET /stores/{store}/range?from=&to=&limit=&reverse=&partition=&allow_stale=`` and
``GET /stores/{store}/prefix?prefix=&limit=&reverse=&partition=&allow_stale=`` answer
the committed pairs (RocksDB only, never a task's uncommitted writes) in the keys'
serialised byte order, ``[from, to)`` like ``KeyValueStore.range``. Keys in ``from``,
``to`` and ``prefix`` are written as in key queries (``worker/http/keys.py``); a ``json``
string prefix matches the JSON strings that start with it (``prefix=%22acct-``... needs
no closing quote: ``prefix="acct-"`` and ``prefix="acct-`` are the same).

Routing. A key lives in one partition, a range in all of them, so a range is answered
**per partition** (no fan-out between instances: one instance never waits on another):

- ``partition=N``: the partition's task is routed exactly like a key's owner
  (``QueryRouter.route``: read here, a local copy with ``allow_stale``, a 307 to the
  instance hosting it, or a 503);
- no ``partition``: this instance answers from every partition whose active task runs
  here, merged in key order, and names the others in ``elsewhere`` (partition ->
  endpoint, null when unassigned); ``complete`` is true when nothing is elsewhere. A
  client wanting the whole store asks one instance, then each ``elsewhere`` endpoint
  with ``partition=``, and merges.

``limit``: :data:`DEFAULT_LIMIT` when absent, at most :data:`MAX_LIMIT` (a 400 naming the
maximum above it). ``more`` is true when pairs beyond the limit exist (in the partitions
answered). ``from`` after ``to``, a bad key or a bad limit is a 400 naming the problem.

Thread-safety: as ``queries.py``; stores are read through their thread-safe
``read_committed_range``.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from worker.assignment.task_id import TaskId
from worker.http.keys import BadKey, key_bytes, render_key, render_value
from worker.http.queries import (
    TASK_HEADER,
    QueryRouter,
    Reply,
    Routed,
    store_of,
    unavailable,
)
from worker.http.targets import echo
from worker.processing.built_topology import StoreSpec, Subtopology
from worker.runtime.status import Status, TaskStatus
from worker.serde import SerdeError
from worker.state.scan import KeyRange, ScanRangeError, check_limit, key_range, prefix_range
from worker.state.store import StoreClosedError

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
PARAMETERS = {
    "range": frozenset({"from", "to", "limit", "reverse", "partition", "allow_stale"}),
    "prefix": frozenset({"prefix", "limit", "reverse", "partition", "allow_stale"}),
}


@dataclass(frozen=True)
class RangeQuery:
    """One range or prefix request, parsed and checked."""

    store: str
    spec: StoreSpec
    subtopology: Subtopology
    keys: KeyRange
    limit: int
    reverse: bool
    partition: int | None
    allow_stale: bool
    path: str


class BadRequest(ValueError):
    """A parameter the query cannot take (HTTP 400)."""


class RangeQueries:
    """Answers range and prefix queries from the router's status snapshot."""

    def __init__(self, router: QueryRouter) -> None:
        self._router = router

    def get(self, store: str, kind: str, params: Mapping[str, str], path: str) -> Reply:
        """Answer ``GET /stores/{store}/{kind}`` (``kind``: range or prefix); ``params``
        are the query parameters (the last of each), ``path`` the raw path and query."""
        return answer_parsed(
            self._router,
            store,
            kind,
            lambda subtopology, spec: parse(store, spec, subtopology, kind, params, path),
            self._answer,
        )

    def _answer(self, query: RangeQuery, status: Status) -> Reply | None:
        tasks = status.routing.partitions.get(query.subtopology.id)
        if not tasks:
            return unavailable(query, "the number of tasks is not known yet (starting)")
        if query.partition is not None:
            if query.partition >= tasks:
                return Reply(400, {"error": f"partition {query.partition} >= {tasks} partitions"})
            task_id = TaskId(query.subtopology.id, query.partition)
            return self._router.route(query, task_id, status, functools.partial(_read_one, query))
        here, elsewhere = self._router.split_partitions(query.subtopology, tasks, status)
        return _read_merged(query, here, elsewhere)


Q = TypeVar("Q", bound=Routed)


def answer_parsed(
    router: QueryRouter,
    store: str,
    kind: str,
    parse_query: Callable[[Subtopology, StoreSpec], Q],
    answer: Callable[[Q, Status], Reply | None],
) -> Reply:
    """Answer a scanning query (range, prefix, windows, sessions): 404 for an unknown
    store, 400 for a request ``parse_query`` rejects, else ``answer`` with the router's
    one retry. Shared so every scanning query maps its errors the same way."""
    found = router.find(store)
    if found is None:
        return Reply(404, {"error": f"unknown store {store!r}", "stores": router.store_names})
    subtopology, spec = found
    try:
        query = parse_query(subtopology, spec)
    except (BadRequest, ScanRangeError) as exc:
        return Reply(400, {"error": f"{kind} query on store {store!r}: {exc}", "store": store})
    return router.answer_retrying(query, functools.partial(answer, query))


def parse(
    store: str,
    spec: StoreSpec,
    subtopology: Subtopology,
    kind: str,
    params: Mapping[str, str],
    path: str,
) -> RangeQuery:
    """The checked request. Raises BadRequest or ScanRangeError (both a 400)."""
    unknown = sorted(set(params) - PARAMETERS[kind])
    if unknown:
        raise BadRequest(f"unknown query parameters {', '.join(echo(n) for n in unknown[:3])}")
    if kind == "prefix":
        if not params.get("prefix"):
            raise BadRequest("prefix= is required (a range query without bounds reads all keys)")
        keys = prefix_range(_prefix_bytes(spec, params["prefix"]))
    else:
        keys = key_range(_bound(spec, params, "from"), _bound(spec, params, "to"))
    limit = check_limit(_int(params, "limit", DEFAULT_LIMIT), MAX_LIMIT)
    assert limit is not None
    partition = _int(params, "partition", None)
    if partition is not None and partition < 0:
        raise BadRequest(f"partition must be >= 0, got {partition}")
    reverse, stale = flag(params, "reverse"), flag(params, "allow_stale")
    return RangeQuery(store, spec, subtopology, keys, limit, reverse, partition, stale, path)


def _bound(spec: StoreSpec, params: Mapping[str, str], name: str) -> bytes | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    try:
        return key_bytes(spec.key_serde, text)
    except BadKey as exc:
        raise BadRequest(f"bad {name}= key: {exc}") from None


def _prefix_bytes(spec: StoreSpec, text: str) -> bytes:
    if getattr(spec.key_serde, "name", None) == "json" and text.startswith('"'):
        text = text if text.endswith('"') and len(text) > 1 else text + '"'
        return _bound(spec, {"prefix": text}, "prefix")[:-1]  # type: ignore[index]
    found = _bound(spec, {"prefix": text}, "prefix")
    assert found is not None
    return found


def _int(params: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = params.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {echo(text)}") from None


_TRUE = frozenset({"true", "1", "yes", ""})
_FALSE = frozenset({"false", "0", "no"})


def flag(params: Mapping[str, str], name: str) -> bool:
    text = params.get(name, "false").lower()
    if text not in _TRUE | _FALSE:
        raise BadRequest(f"{name} must be true or false, got {echo(text)}")
    return text in _TRUE


def _pairs(query: RangeQuery, local: TaskStatus) -> list[tuple[bytes, bytes]] | None:
    """Up to limit + 1 committed pairs of the local task's store; None if it closed."""
    view = store_of(local, query.store)
    if view is None:
        return None
    try:
        return view.store.read_committed_range(  # type: ignore[no-any-return]
            query.keys, reverse=query.reverse, limit=query.limit + 1
        )
    except StoreClosedError:
        return None


def _read_one(query: RangeQuery, task_id: TaskId, local: TaskStatus, stale: bool) -> Reply | None:
    pairs = _pairs(query, local)
    if pairs is None:
        return None
    body = {"partitions": [task_id.partition], "elsewhere": {}, "complete": True}
    headers = {TASK_HEADER: str(task_id)}
    if stale:
        body["lag"] = local.lag
    return _render(query, pairs, body, headers)


def _read_merged(
    query: RangeQuery, here: list[tuple[TaskId, TaskStatus]], elsewhere: dict[str, str | None]
) -> Reply | None:
    found: list[list[tuple[bytes, bytes]]] = []
    for _task_id, local in here:
        pairs = _pairs(query, local)
        if pairs is None:
            return None
        found.append(pairs)
    merged = list(heapq.merge(*found, key=lambda kv: kv[0], reverse=query.reverse))
    body = {
        "partitions": [task_id.partition for task_id, _ in here],
        "elsewhere": elsewhere,
        "complete": not elsewhere,
    }
    return _render(query, merged[: query.limit + 1], body, {})


def _render(
    query: RangeQuery,
    pairs: list[tuple[bytes, bytes]],
    body: dict[str, Any],
    headers: dict[str, str],
) -> Reply:
    items = []
    for key, data in pairs[: query.limit]:
        try:
            value, encoding = render_value(query.spec.value_serde, data)
        except SerdeError as exc:
            return Reply(500, {"error": f"stored value does not decode: {exc}"}, headers)
        item = {"key": render_key(query.spec.key_serde, key), "value": value}
        if encoding != "json":
            item["encoding"] = encoding
        items.append(item)
    body = {"store": query.store, "items": items, "limit": query.limit, **body}
    body["more"] = len(pairs) > query.limit
    return Reply(200, body, headers)
