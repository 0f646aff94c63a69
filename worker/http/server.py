"""HTTP on ``http.port``: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

Runs in a daemon thread with the standard library server: the endpoints are few and
cheap, and the only shared data is the immutable status snapshot the processing loop
publishes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.observability import Metrics
from worker.runtime.status import Status

# The loop publishes a heartbeat each iteration; a loop stuck longer than this is unhealthy.
HEALTH_STALE_SECONDS = 60.0


class HttpServer:
    def __init__(
        self, host: str, port: int, metrics: Metrics, status: Callable[[], Status]
    ) -> None:
        self._metrics = metrics
        self._status = status
        handler = self._handler_class()
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(outer._metrics.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    status = outer._status()
                    alive = time.monotonic() - status.heartbeat < HEALTH_STALE_SECONDS
                    self._json(200 if alive else 503, {"alive": alive, "state": status.state.value})
                elif path == "/readyz":
                    status = outer._status()
                    body = {
                        "ready": status.ready,
                        "state": status.state.value,
                        "tasks": [t.__dict__ for t in status.tasks],
                    }
                    self._json(200 if status.ready else 503, body)
                else:
                    self._json(404, {"error": f"no such endpoint: {path}"})

            def _json(self, code: int, body: object) -> None:
                self._send(code, orjson.dumps(body), "application/json")

            def _send(self, code: int, payload: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return  # access logs would drown the structured log

        return Handler
