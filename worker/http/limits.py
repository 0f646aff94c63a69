"""Bounds on the HTTP server: connections, concurrent queries, time per socket operation.

The standard library's threading server gives every connection a thread, waits on a
socket forever and keeps a listen backlog of 5. Idle or slow clients then pile up
threads without end, and a burst of connections overflows the backlog (the kernel drops
SYNs: the client retries after 1 s, then 3 s), which is enough to fail a 3 s liveness
probe. :class:`BoundedServer` fixes the three:

1. **Backlog** :data:`BACKLOG` (the kernel caps it at ``net.core.somaxconn``).
2. **A socket timeout** (``http.socket.timeout.ms``) on every receive and send, the
   TLS handshake included (it runs in the connection's thread, never in the accept
   loop): a client that goes quiet loses its thread after that long.
3. **At most** ``http.max.connections`` **connection threads**; a connection beyond
   them takes the place of the one that has waited longest for its request
   (:mod:`worker.http.deadlines`), or, when every connection is busy answering, is
   answered 503 at once (plain HTTP) or closed (TLS) by the accept loop, without
   reading anything. An evicted thread ends at once, but until it has, the count may
   pass the cap by the evictions in flight (at most the cap again).
4. **A deadline for the whole request** (``http.request.timeout.ms``), line and headers,
   the TLS handshake included (:mod:`worker.http.deadlines`).

On top, :class:`RequestSlots` (``http.max.requests``) bounds the query requests being
answered at once: beyond it a query gets a 503 with ``Retry-After``. The public paths
(probes, metrics) never take a slot, so they are answered however many queries run.

Thread-safety: the counters are guarded by one lock; the accept loop and the connection
threads share them.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from worker.config import Settings
from worker.http.deadlines import WaitingConnections
from worker.observability import get_logger

BACKLOG = 1024

_log = get_logger(component="http")

_REFUSAL = b'{"error":"too many connections (http.max.connections); retry"}'
_REFUSED = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n"
    + f"Content-Length: {len(_REFUSAL)}\r\n\r\n".encode()
    + _REFUSAL
)


@dataclass(frozen=True)
class HttpLimits:
    """The bounds of one server (see the module doc)."""

    max_connections: int = 512
    max_requests: int = 16
    socket_timeout_s: float = 10.0
    request_timeout_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            settings.http_max_connections,
            settings.http_max_requests,
            settings.http_socket_timeout_ms / 1000.0,
            settings.http_request_timeout_ms / 1000.0,
        )


class RequestSlots:
    """At most ``size`` query requests answered at once; ``try_take`` never waits."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = threading.BoundedSemaphore(size)

    def try_take(self) -> bool:
        return self._free.acquire(blocking=False)

    def give_back(self) -> None:
        self._free.release()


class BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server with a backlog, a connection cap, socket timeouts and TLS
    negotiated in the connection's thread (see the module doc)."""

    request_queue_size = BACKLOG
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        limits: HttpLimits,
        tls: ssl.SSLContext | None,
        on_refused: Callable[[str], None] = lambda reason: None,
    ) -> None:
        """``on_refused(reason)`` counts a connection refused (``connections``), evicted
        (``evicted``) or closed at its request deadline (``deadline``)."""
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.limits = limits
        self.waiting = WaitingConnections()
        self._tls = tls
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._connections = 0
        super().__init__(address, handler)

    @property
    def connections(self) -> int:
        """Connection threads running now."""
        return self._connections

    def process_request(self, request: Any, client_address: Any) -> None:
        """In the accept loop: start the connection's thread, or refuse it when full."""
        with self._lock:
            full = self._connections >= self.limits.max_connections
        if full and self.waiting.evict_oldest():
            self._on_refused("evicted")
            full = False
        if full:
            self._on_refused("connections")
            self._refuse(request)
            return
        with self._lock:
            self._connections += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """The connection's thread, which names it among the waiting ones for its life."""
        self.waiting.waiting(threading.get_ident(), request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.waiting.busy(threading.get_ident())
            self._release()

    def deadline_expired(self) -> None:
        """A request did not arrive within its deadline (its connection closes)."""
        self._on_refused("deadline")

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's thread: the timeout, then the TLS handshake (within the
        request deadline), then HTTP."""
        limits = self.limits
        if self._tls is None:
            request.settimeout(limits.socket_timeout_s)
            super().finish_request(request, client_address)
            return
        request.settimeout(min(limits.socket_timeout_s, limits.request_timeout_s))
        try:
            wrapped = self._tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError):
            return  # a failed or abandoned handshake: the caller closes the socket
        self.waiting.waiting(threading.get_ident(), wrapped)  # the same connection, wrapped
        try:
            super().finish_request(wrapped, client_address)
        finally:
            self.shutdown_request(wrapped)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer is not an error; anything else is logged
        (socketserver would print a traceback to stderr)."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        _log.exception("http.connection_error", client=str(client_address))

    def _release(self) -> None:
        with self._lock:
            self._connections -= 1

    def _refuse(self, request: socket.socket) -> None:
        try:
            if self._tls is None:
                request.setblocking(False)
                request.send(_REFUSED)
        except OSError:
            pass  # the client is gone or its buffer is full: closing is answer enough
        finally:
            self.shutdown_request(request)
