"""A TCP proxy between workers and the broker that tests can cut, restore and slow down.

The test broker keeps everything in memory, so an outage is simulated here, never by
restarting it (platform-facts.md). Clients must reach the broker only through the proxy:
start the broker with the proxy's port as its advertised listener
(``EmbeddedBroker(advertised_port=proxy.port)``), or metadata sends them around it.

- :meth:`TcpProxy.cut`: every open connection is reset and the listening socket is
  closed, so new connections are refused, until :meth:`TcpProxy.restore` listens again
  on the same port;
- :meth:`TcpProxy.blackhole`: a network partition as packet loss shows it: connections
  stay open and new ones are accepted, but no byte is passed on in either direction
  until :meth:`TcpProxy.restore`; what was held back is then delivered in order.
  Clients notice only by their own timeouts, and a request the broker had already taken
  is answered late instead of cut off halfway;
- ``latency``: each chunk of data waits this long before it is passed on, in both
  directions (a slow network; a request-response round trip costs twice that).

Threads: one acceptor while up, two pumps per connection. :meth:`close` stops them all.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType

_CHUNK = 65536
_ACCEPT_POLL_S = 0.1


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a dropped network path looks to the client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One client connection and its connection to the target."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            _reset(self.client)
            _reset(self.upstream)


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port``. Thread-safe controls."""

    def __init__(
        self, target_host: str, target_port: int, port: int = 0, latency: float = 0.0
    ) -> None:
        self.target = (target_host, target_port)
        self.latency = latency
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._stopped = threading.Event()
        self._flowing = threading.Event()  # cleared while blackholed
        self._flowing.set()
        self.port = port
        self.connections = 0  # forwarded connections over the proxy's lifetime
        self._listen()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(_ACCEPT_POLL_S)
        self.port = int(listener.getsockname()[1])
        self._listener = listener

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        """Accept and forward connections (idempotent)."""
        with self._lock:
            if self._listener is None:
                self._listen()
            if self._acceptor is None or not self._acceptor.is_alive():
                self._acceptor = threading.Thread(
                    target=self._accept_loop, args=(self._listener,), name="proxy", daemon=True
                )
                self._acceptor.start()
        return self

    def cut(self) -> None:
        """Reset every connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            listener, self._listener = self._listener, None
            acceptor = self._acceptor
            links, self._links = self._links, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.close()
        if acceptor is not None:
            acceptor.join(5)
        for link in links:
            link.close()

    def blackhole(self) -> None:
        """Hold every byte in both directions, on open and new connections, until
        :meth:`restore`."""
        self._flowing.clear()

    def restore(self) -> None:
        """Forward again: listen on the same port after :meth:`cut`, pass on what a
        :meth:`blackhole` held back."""
        self._flowing.set()
        if not self._stopped.is_set():
            self.start()

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    def open_connections(self) -> int:
        with self._lock:
            return len(self._links)

    def close(self) -> None:
        """Stop for good: close everything. Idempotent."""
        self._stopped.set()
        self._flowing.set()
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by cut()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            for sock in (client, upstream):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, upstream)
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    link.close()
                    return
                self._links.add(link)
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(link, src, dst), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not link.closed.is_set():
                data = src.recv(_CHUNK)
                if not data:
                    break
                if self.latency > 0:
                    # The simulated network delay itself, not a wait for a condition.
                    time.sleep(self.latency)
                while not self._flowing.wait(_ACCEPT_POLL_S):
                    if link.closed.is_set():
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            link.close()
            with self._lock:
                self._links.discard(link)
