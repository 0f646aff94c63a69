"""The deadline of a whole request, and which connections may give way to new ones.

``http.socket.timeout.ms`` bounds each receive, so a client that sends one header line
every few seconds keeps its connection (and its slot under ``http.max.connections``) for
ever: eight such sockets held a worker capped at 8 connections answering 503, its
liveness probe included, for as long as they ran (issue 32). Two bounds close that:

1. **A request deadline** (``http.request.timeout.ms``): the request line and headers of
   each request (the server reads no bodies) must arrive within it, counted from when the
   connection starts waiting for the request (the TLS handshake included), or the
   connection is closed and counted (``worker_http_refused_total{reason="deadline"}``).
   :class:`DeadlineReader` sets each receive's timeout to what is left of it.
2. **Eviction when full**: a connection that arrives when a listener is at its cap takes
   the place of the connection that has waited longest for its request, which is closed
   and counted (``reason="evicted"``); only when every connection is busy answering is
   the newcomer refused. Idle and slow clients cannot keep a probe out: its request
   arrives at once, so it is never the one waiting longest.

Thread-safety: :class:`WaitingConnections` is shared by the accept loop and the
connection threads, under its own lock; a :class:`DeadlineReader` belongs to one
connection's thread.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any


class WaitingConnections:
    """The connections waiting for a request, oldest first (a dict keeps the order)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, socket.socket] = {}

    def waiting(self, key: int, connection: socket.socket) -> None:
        """``connection`` waits for a request (a new one, or the next on a kept-alive
        connection): it may be evicted. ``key`` names the connection for its life."""
        with self._lock:
            self._waiting.pop(key, None)
            self._waiting[key] = connection

    def busy(self, key: int) -> None:
        """Its request arrived (or it closed): it is not evicted."""
        with self._lock:
            self._waiting.pop(key, None)

    def evict_oldest(self) -> bool:
        """Shut down the connection that has waited longest; False when none waits."""
        with self._lock:
            if not self._waiting:
                return False
            key = next(iter(self._waiting))
            connection = self._waiting.pop(key)
        # Its thread's receive returns at once; OSError: it closed meanwhile, and its slot
        # comes back anyway.
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
        return True


class DeadlineReader(io.RawIOBase):
    """A connection's receives, each bounded by the socket timeout and by what is left of
    the request deadline (:meth:`arm`). Owner thread only."""

    def __init__(
        self,
        connection: socket.socket,
        socket_timeout_s: float,
        deadline_s: float,
        on_expired: Callable[[], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._connection = connection
        self._socket_timeout_s = socket_timeout_s
        self._deadline_s = deadline_s
        self._on_expired = on_expired
        self._monotonic = monotonic
        self._until = float("inf")

    def arm(self) -> None:
        """A request is awaited: it must have arrived within the deadline from now."""
        self._until = self._monotonic() + self._deadline_s

    def disarm(self) -> None:
        """The request arrived: the socket timeout alone bounds what follows."""
        self._until = float("inf")
        self._connection.settimeout(self._socket_timeout_s)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Raises TimeoutError (http.server closes the connection) when the deadline
        passed or the socket stayed silent for the socket timeout."""
        left = self._until - self._monotonic()
        if left <= 0:
            self._expired()
        timeout = min(self._socket_timeout_s, left)
        self._connection.settimeout(timeout)
        try:
            return self._connection.recv_into(buffer)
        except TimeoutError:
            if timeout < self._socket_timeout_s:
                self._expired()
            raise

    def _expired(self) -> None:
        self._until = float("inf")  # counted once
        self._on_expired()
        raise TimeoutError("the request did not arrive within http.request.timeout.ms")


class DeadlineHandler(BaseHTTPRequestHandler):
    """A request handler whose request line and headers must arrive within the server's
    request deadline, and which may be evicted while it waits for them. Its server is a
    :class:`worker.http.limits.BoundedServer`."""

    server: Any

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain file over the socket: replaced by the bounded one
        limits = self.server.limits
        self._reader = DeadlineReader(
            self.connection,
            limits.socket_timeout_s,
            limits.request_timeout_s,
            self.server.deadline_expired,
        )
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self.server.waiting.waiting(threading.get_ident(), self.connection)
        self._reader.arm()
        super().handle_one_request()

    def parse_request(self) -> bool:
        """After the headers (http.server reads them here): busy, no deadline."""
        parsed = super().parse_request()
        self.server.waiting.busy(threading.get_ident())
        self._reader.disarm()
        return parsed
