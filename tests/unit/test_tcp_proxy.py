"""The fault tests' TCP proxy: forwards, cuts (reset + refuse), restores, adds latency."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[int]:
    """An echo server on a free port; returns the port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def roundtrip(port: int, payload: bytes = b"ping") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        return sock.recv(4096)


def test_the_proxy_forwards_both_ways(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy:
        assert roundtrip(proxy.port) == b"ping"


def test_a_cut_resets_open_connections_and_refuses_new_ones_until_restored(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy:
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        sock.sendall(b"a")
        assert sock.recv(16) == b"a"

        proxy.cut()

        with pytest.raises(OSError):
            sock.sendall(b"b")
            if not sock.recv(16):
                raise ConnectionResetError("closed")
        sock.close()
        with pytest.raises(ConnectionRefusedError):
            roundtrip(proxy.port)
        port = proxy.port
        proxy.restore()
        assert proxy.port == port
        assert roundtrip(proxy.port) == b"ping"


def test_latency_delays_each_direction(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo, latency=0.1) as proxy:
        started = time.monotonic()
        assert roundtrip(proxy.port) == b"ping"
        assert time.monotonic() - started >= 0.2


def test_a_blackhole_holds_bytes_on_open_and_new_connections_until_restored(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        held.sendall(b"a")
        assert held.recv(16) == b"a"

        proxy.blackhole()

        held.sendall(b"b")
        held.settimeout(0.5)
        with pytest.raises(TimeoutError):
            held.recv(16)  # nothing comes back while blackholed: the connection stays open
        late = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        late.sendall(b"c")
        late.settimeout(0.5)
        with pytest.raises(TimeoutError):
            late.recv(16)

        proxy.restore()

        held.settimeout(5)
        late.settimeout(5)
        assert held.recv(16) == b"b", "what was held back is delivered after the restore"
        assert late.recv(16) == b"c"
        held.close()
        late.close()
