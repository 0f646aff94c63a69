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

Runs in daemon threads with the standard library server: the endpoints are cheap, and
the only shared data is the immutable status snapshot the processing loop publishes (and
the stores in it, read through their thread-safe ``get_committed``). Every answer but
``/metrics`` and ``/routing`` is JSON; errors are ``{"error": "..."}`` with a 4xx or 5xx
code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.errors import FatalError
from worker.http.queries import QueryRouter, Reply
from worker.http.ranges import PARAMETERS, RangeQueries
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
    thread never reads a clock of its own.

    Construction binds the port: raises FatalError, naming ``http.port``, when it cannot
    (most often another worker process on the host has it: each needs its own).
    """

    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        status: Callable[[], Status],
        queries: QueryRouter | None = None,
    ) -> None:
        self._metrics = metrics
        self._status = status
        self._queries = queries
        self._ranges = None if queries is None else RangeQueries(queries)
        self._windows = None if queries is None else WindowQueries(queries)
        handler = self._handler_class()
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise FatalError(
                f"http.port: cannot listen on {host}:{port}: {exc.strerror or exc}; every "
                "worker process on a host needs its own http.port"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _POLL_SECONDS},
            name="http",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def route(self, raw_path: str) -> Reply:
        """The JSON answer to ``GET raw_path`` (every path but ``/metrics``)."""
        parts = urlsplit(raw_path)
        path = parts.path
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
            origin = path + (f"?{parts.query}" if parts.query else "")  # kept for redirects
            return self._store_query(segments, parts.query, origin)
        return Reply(404, {"error": f"no such endpoint: {path}"})

    def _store_query(self, segments: list[str], query: str, origin: str) -> Reply:
        assert self._queries is not None and self._ranges is not None
        assert self._windows is not None
        if len(segments) == 4 and segments[3] in PARAMETERS | WINDOW_PARAMETERS:
            last = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
            store = unquote(segments[2], errors="strict")
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
        params = parse_qs(query, keep_blank_values=True)
        unknown = sorted(set(params) - {"allow_stale"})
        if unknown:
            return Reply(400, {"error": f"unknown query parameters: {unknown}"})
        stale_text = params.get("allow_stale", ["false"])[-1].lower()
        if stale_text not in _TRUE | _FALSE:
            return Reply(400, {"error": f"allow_stale must be true or false, got {stale_text!r}"})
        store = unquote(segments[2], errors="strict")
        key = unquote(segments[4], errors="strict")
        return self._queries.get(store, key, stale_text in _TRUE, origin)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if urlsplit(self.path).path == "/metrics":
                    self._send(200, generate_latest(outer._metrics.registry), CONTENT_TYPE_LATEST)
                    return
                try:
                    reply = outer.route(self.path)
                except UnicodeDecodeError:
                    reply = Reply(400, {"error": "the path is not valid percent-encoded UTF-8"})
                except Exception as exc:  # a bug: answer, log, keep serving
                    _log.exception("http.error", path=self.path)
                    reply = Reply(500, {"error": f"internal error: {type(exc).__name__}"})
                if isinstance(reply.body, bytes):
                    self._send(reply.status, reply.body, "application/octet-stream", reply.headers)
                else:
                    self._json(reply.status, reply.body, reply.headers)

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
