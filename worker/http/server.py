"""HTTP on ``http.port``: metrics, health, readiness, interactive queries, local tasks.

===================================  ==================================================
``GET /metrics``                     Prometheus text format
``GET /healthz``                     200 while the processing loop is alive, else 503
                                     (:meth:`worker.runtime.status.Status.judged`)
``GET /readyz``                      200 when running and every active task processes;
                                     503 while starting, restoring or rebalancing
``GET /stores/{store}/keys/{key}``   the committed value of ``key`` (``?allow_stale=true``
                                     may answer from a local standby), a 307 to the
                                     instance that hosts it, or a JSON 4xx/503
``GET /stores/{store}/range``        committed pairs in key order, ``?from=&to=&limit=``
``GET /stores/{store}/prefix``       and ``?prefix=&limit=``: per partition, see
                                     :mod:`worker.http.ranges`
``GET /stores/{store}/windows``      committed windows ``?key=&from=&to=&limit=``, and
``GET /stores/{store}/sessions``     sessions: see :mod:`worker.http.windows`
``GET /tasks``                       this instance's tasks (kind, state, offsets, lag,
                                     unavailable seconds by cause) and the latest
                                     assignment's host maps
``GET /routing``                     the group's routing map (binary), on the instance
                                     that holds it (:mod:`worker.http.directory`)
===================================  ==================================================

Runs in daemon threads with the standard library server, bounded (connections,
concurrent queries, socket timeouts: :mod:`worker.http.limits`): the endpoints are
cheap, and the only shared data is the immutable status snapshot the processing loop
publishes (and the stores in it, read through their thread-safe ``get_committed``).
``/healthz``, ``/readyz`` and ``/metrics`` answer anyone; every other path needs what
:mod:`worker.http.security` says (a token, a client certificate, or a loopback
address). Every answer but ``/metrics`` and ``/routing`` is JSON, errors included
(``{"error": "..."}`` with a 4xx or 5xx code, the standard library's own 400, 414, 431
and 501 too).
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Mapping
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.endpoint import is_loopback
from worker.errors import FatalError
from worker.http.deadlines import DeadlineHandler
from worker.http.limits import BoundedServer, HttpLimits, RequestSlots
from worker.http.queries import ENDPOINT_HEADER, TASK_HEADER, QueryRouter, Reply
from worker.http.ranges import PARAMETERS, RangeQueries
from worker.http.security import PUBLIC_PATHS, Access, HttpSecurity
from worker.http.targets import (
    HOP_HEADER,
    BadTarget,
    Target,
    decode,
    echo,
    parameters,
    parse_target,
)
from worker.http.windows import PARAMETERS as WINDOW_PARAMETERS
from worker.http.windows import WindowQueries
from worker.observability import Metrics, get_logger
from worker.runtime.status import Status

# How quickly stop() returns (the server checks for shutdown this often).
_POLL_SECONDS = 0.1
_TRUE = frozenset({"true", "1", "yes", ""})  # a bare ?allow_stale counts as true
_FALSE = frozenset({"false", "0", "no"})

_log = get_logger(component="http")


class HttpServer:
    """The HTTP endpoints of one worker. ``queries`` is None when there is no topology to
    query (the interactive-query and ``/tasks`` paths then answer 404). ``status`` hands
    out the latest snapshot with its liveness already judged (``Worker.status``): this
    thread never reads a clock of its own. ``security`` defaults to plain HTTP with the
    query API open on a loopback ``host`` and off elsewhere; ``limits`` to
    :class:`~worker.http.limits.HttpLimits`' defaults. With ``management_port`` a second
    listener serves the public paths only (``/healthz``, ``/readyz``, ``/metrics``), with
    its own accept loop and connection cap: however busy the query port is, probes and
    scrapes do not wait behind its queue.

    Construction binds the ports: raises FatalError, naming ``http.port`` or
    ``http.management.port``, when it cannot (most often another worker process on the
    host has it: each needs its own).
    """

    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        status: Callable[[], Status],
        queries: QueryRouter | None = None,
        security: HttpSecurity | None = None,
        limits: HttpLimits | None = None,
        management_port: int | None = None,
    ) -> None:
        self._metrics = metrics
        self._status = status
        self._queries = queries
        self._ranges = None if queries is None else RangeQueries(queries)
        self._windows = None if queries is None else WindowQueries(queries)
        self._security = security or HttpSecurity(
            Access(open=is_loopback(host), off_reason=f"http.host {host!r} is not loopback")
        )
        self._limits = limits or HttpLimits()
        self._slots = RequestSlots(self._limits.max_requests)
        self._server = self._listen("http.port", host, port, self._handler_class(False))
        self._management: BoundedServer | None = None
        if management_port is not None:
            try:
                self._management = self._listen(
                    "http.management.port", host, management_port, self._handler_class(True)
                )
            except FatalError:
                self._server.server_close()
                raise
        self._threads = [
            threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": _POLL_SECONDS},
                name=name,
                daemon=True,
            )
            for name, server in (("http", self._server), ("http-management", self._management))
            if server is not None
        ]

    def _listen(
        self, key: str, host: str, port: int, handler: type[BaseHTTPRequestHandler]
    ) -> BoundedServer:
        try:
            return BoundedServer(
                (host, port),
                handler,
                self._limits,
                self._security.server_context,
                lambda reason: self._metrics.http_refused.labels(reason=reason).inc(),
            )
        except OSError as exc:
            raise FatalError(
                f"{key}: cannot listen on {host}:{port}: {exc.strerror or exc}; every "
                f"worker process on a host needs its own {key}"
            ) from exc

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def management_port(self) -> int | None:
        """The port of the probes-and-metrics listener, None without one."""
        return None if self._management is None else int(self._management.server_address[1])

    @property
    def connections(self) -> int:
        """Connection threads running now on ``http.port`` (``http.max.connections``)."""
        return self._server.connections

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        _log.info(
            "http.listening",
            host=self._server.server_address[0],
            port=self.port,
            management_port=self.management_port,
            tls=self._security.server_context is not None,
            query_api=self._security.access.mode,
        )

    def stop(self) -> None:
        for server in (self._server, self._management):
            if server is not None:
                server.shutdown()
                server.server_close()

    def route(self, raw_path: str, hop_header: str | None = None) -> Reply:
        """The JSON answer to ``GET raw_path`` (every path but ``/metrics``), once the
        request may be answered (access and slots are the handler's)."""
        try:
            reply = self._answer(parse_target(raw_path, hop_header))
        except BadTarget as exc:
            return Reply(400, {"error": f"bad request target: {exc}"})
        except UnicodeDecodeError:
            return Reply(400, {"error": "the path is not valid percent-encoded UTF-8"})
        return _bounded(reply)

    def _answer(self, target: Target) -> Reply:
        path = target.path
        if path == "/healthz":
            status = self._status()  # liveness judged by the worker, on its clock
            alive = status.alive
            return Reply(200 if alive else 503, {"alive": alive, "state": status.state.value})
        if path == "/readyz":
            status = self._status()
            body = {
                "ready": status.ready,
                "state": status.state.value,
                "tasks": [
                    {"task_id": t.task_id, "kind": t.kind, "state": t.state} for t in status.tasks
                ],
            }
            return Reply(200 if status.ready else 503, body)
        segments = path.split("/")
        if self._queries is not None and path == "/tasks":
            return self._queries.tasks()
        if self._queries is not None and path == "/routing":
            return self._queries.routing_map()
        if self._queries is not None and len(segments) >= 2 and segments[1] == "stores":
            reply = self._store_query(segments, target)
            if target.hopped and reply.status == 307:
                self._metrics.http_refused.labels(reason="misrouted").inc()
                return _misrouted(reply)
            return reply
        return Reply(404, {"error": f"no such endpoint: {path}"})

    def _store_query(self, segments: list[str], target: Target) -> Reply:
        assert self._queries is not None and self._ranges is not None
        assert self._windows is not None
        origin = target.redirect_origin
        if len(segments) == 4 and segments[3] in PARAMETERS | WINDOW_PARAMETERS:
            last = parameters(target.query)
            store = decode(segments[2])
            if segments[3] in WINDOW_PARAMETERS:
                return self._windows.get(store, segments[3], last, origin)
            return self._ranges.get(store, segments[3], last, origin)
        if len(segments) != 5 or segments[3] != "keys":
            return Reply(
                404,
                {
                    "error": "expected /stores/{store}/keys/{key} (encode '/' in a key as "
                    "%2F), /stores/{store}/range or /stores/{store}/prefix"
                },
            )
        params = parameters(target.query)
        unknown = sorted(set(params) - {"allow_stale"})
        if unknown:
            names = ", ".join(echo(name) for name in unknown[:3])
            return Reply(400, {"error": f"unknown query parameters: {names}"})
        stale_text = params.get("allow_stale", "false").lower()
        if stale_text not in _TRUE | _FALSE:
            shown = echo(stale_text)
            return Reply(400, {"error": f"allow_stale must be true or false, got {shown}"})
        store = decode(segments[2])
        key = decode(segments[4])
        return self._queries.get(store, key, stale_text in _TRUE, origin)

    def _guarded(self, raw_path: str, headers: Message, peer: object) -> Reply:
        """A query-API request: credentials first, then a slot, then the answer."""
        denied = self._security.access.check(headers.get("Authorization"), peer)
        if denied is not None:
            reason = "unauthorized" if denied.status == 401 else "forbidden"
            self._metrics.http_refused.labels(reason=reason).inc()
            return denied
        if not self._slots.try_take():
            self._metrics.http_refused.labels(reason="requests").inc()
            return Reply(
                503,
                {"error": f"too many queries at once (http.max.requests = {self._slots.size})"},
                {"Retry-After": "1"},
            )
        try:
            return self.route(raw_path, headers.get(HOP_HEADER))
        finally:
            self._slots.give_back()

    def _handler_class(self, public_only: bool) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(DeadlineHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                try:
                    path = parse_target(self.path).path
                except BadTarget:
                    path = ""  # not public: the route answers the 400 after the checks
                if path == "/metrics":
                    self._send(200, generate_latest(outer._metrics.registry), CONTENT_TYPE_LATEST)
                    return
                try:
                    if path in PUBLIC_PATHS:
                        reply = outer.route(self.path)
                    elif public_only:
                        reply = Reply(404, {"error": f"{path}: only probes and /metrics here"})
                    else:
                        reply = outer._guarded(self.path, self.headers, self._peer())
                except Exception as exc:  # a bug: answer, log, keep serving
                    _log.exception("http.error", path=self.path)
                    reply = Reply(500, {"error": f"internal error: {type(exc).__name__}"})
                if isinstance(reply.body, bytes):
                    self._send(reply.status, reply.body, "application/octet-stream", reply.headers)
                else:
                    self._json(reply.status, reply.body, reply.headers)

            def _peer(self) -> object:
                """The client's verified certificate (mutual TLS), or None."""
                if isinstance(self.connection, ssl.SSLSocket):
                    return self.connection.getpeercert()
                return None

            def send_error(
                self, code: int, message: str | None = None, explain: str | None = None
            ) -> None:
                """http.server's own errors (bad request line, 414, 431, 501) as JSON."""
                self.close_connection = True
                text = message or explain or HTTPStatus(code).phrase
                payload = orjson.dumps({"error": _cut(text)})  # it may quote the request line
                self.send_response(code, message)
                self.send_header("Connection", "close")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                    self.wfile.write(payload)

            def _json(self, code: int, body: object, headers: Mapping[str, str]) -> None:
                self._send(code, orjson.dumps(body), "application/json", headers)

            def _send(
                self,
                code: int,
                payload: bytes,
                content_type: str,
                headers: Mapping[str, str] | None = None,
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return  # access logs would drown the structured log

        return Handler


_ERROR_CHARS = 200  # an error message, at most: one that quotes the request is cut


def _cut(text: str) -> str:
    return text if len(text) <= _ERROR_CHARS else f"{text[:_ERROR_CHARS]}... (cut)"


def _bounded(reply: Reply) -> Reply:
    """``reply`` with its error message cut to :data:`_ERROR_CHARS`: a refusal repeats at
    most a short prefix of what it refuses, whichever part of the code wrote it (a
    serde's or a scan's error may quote the key or bound it could not use)."""
    body = reply.body
    if reply.status < 400 or not isinstance(body, dict):
        return reply
    error = body.get("error")
    if not isinstance(error, str) or len(error) <= _ERROR_CHARS:
        return reply
    return Reply(reply.status, {**body, "error": _cut(error)}, reply.headers)


def _misrouted(redirect: Reply) -> Reply:
    """The answer instead of a second redirect: the routing maps disagree for now."""
    endpoint = redirect.headers.get(ENDPOINT_HEADER, "")
    return Reply(
        503,
        {
            "error": "misrouted: this request was redirected here already and this "
            f"instance's routing map sends it on to {endpoint}; the instances' maps "
            "disagree until the group's assignment settles: retry",
            "endpoint": endpoint,
        },
        {"Retry-After": "1", TASK_HEADER: redirect.headers.get(TASK_HEADER, "")},
    )
