"""The HTTP server stays bounded: idle sockets time out, connections and concurrent queries
are capped with a 503, and probes are answered fast whatever the queries and the idle
connections do."""

from __future__ import annotations

import contextlib
import http.client
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.http_load import healthz, percentile, start_burst
from tests.support.waiting import wait_until
from tests.unit.http.conftest import StatusBox
from worker.http.limits import HttpLimits
from worker.http.queries import QueryRouter, Reply
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology


class BlockingRouter(QueryRouter):
    """``/tasks`` waits for ``release``: a query that holds its slot as long as a test likes."""

    def __init__(self, topology: BuiltTopology, box: StatusBox) -> None:
        super().__init__(topology, box)
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def tasks(self) -> Reply:
        self.entered.release()
        assert self.release.wait(10), "never released"
        return super().tasks()


def serve(
    box: StatusBox, router: QueryRouter | None, limits: HttpLimits, metrics: Metrics | None = None
) -> HttpServer:
    server = HttpServer("127.0.0.1", 0, metrics or Metrics(), box, router, limits=limits)
    server.start()
    return server


def refused(metrics: Metrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("worker_http_refused_total", {"reason": reason})


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as opened:
        yield opened


def status_of(port: int, path: str, timeout: float = 5) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def idle_socket(port: int, stack: ExitStack, partial: bytes = b"") -> socket.socket:
    """A connection that sends ``partial`` (perhaps nothing) and then nothing more."""
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
    if partial:
        sock.sendall(partial)
    return sock


def test_a_silent_connection_is_closed_after_the_socket_timeout(
    box: StatusBox, stack: ExitStack
) -> None:
    server = serve(box, None, HttpLimits(socket_timeout_s=0.3))
    stack.callback(server.stop)
    sock = idle_socket(server.port, stack, b"GET /healthz HTTP/1.1\r\n")  # never finished
    wait_until(lambda: server.connections == 1, 5, 0.01, "the connection's thread")

    wait_until(lambda: server.connections == 0, 5, 0.02, "the timeout to free the thread")

    sock.settimeout(5)
    assert sock.recv(4096) == b""  # closed by the server


def test_connections_beyond_the_cap_get_a_503_at_once_when_every_one_is_busy(
    topology: BuiltTopology, box: StatusBox, stack: ExitStack
) -> None:
    router = BlockingRouter(topology, box)
    metrics = Metrics()
    server = serve(box, router, HttpLimits(max_connections=8, max_requests=8), metrics)
    stack.callback(server.stop)
    stack.callback(router.release.set)
    for _ in range(8):  # each one answering a query that waits for the release
        threading.Thread(target=status_of, args=(server.port, "/tasks", 15), daemon=True).start()
    for _ in range(8):
        assert router.entered.acquire(timeout=5), "a query never started"

    started = time.monotonic()
    code = status_of(server.port, "/healthz")

    assert code == 503
    assert time.monotonic() - started < 2
    assert server.connections == 8
    assert refused(metrics, "connections") == 1


def test_at_the_cap_a_new_connection_takes_the_place_of_the_longest_waiting_one(
    box: StatusBox, stack: ExitStack
) -> None:
    metrics = Metrics()
    server = serve(box, None, HttpLimits(max_connections=8, socket_timeout_s=10), metrics)
    stack.callback(server.stop)
    oldest = idle_socket(server.port, stack)
    wait_until(lambda: server.connections == 1, 5, 0.01, "the first connection's thread")
    for _ in range(7):
        idle_socket(server.port, stack, b"GET /healthz HTTP/1.1\r\n")  # never finished
    wait_until(lambda: server.connections == 8, 5, 0.01, "eight connection threads")

    code = status_of(server.port, "/healthz")

    assert code == 200
    assert refused(metrics, "evicted") == 1
    oldest.settimeout(5)
    assert oldest.recv(4096) == b"", "the longest-waiting connection was closed"
    wait_until(lambda: server.connections == 7, 5, 0.01, "its thread ended")


def test_a_request_trickling_in_is_closed_at_its_deadline(box: StatusBox, stack: ExitStack) -> None:
    metrics = Metrics()
    limits = HttpLimits(socket_timeout_s=10, request_timeout_s=0.5)
    server = serve(box, None, limits, metrics)
    stack.callback(server.stop)
    sock = idle_socket(server.port, stack, b"GET /healthz HTTP/1.1\r\n")
    started = time.monotonic()

    closed = False
    while not closed and time.monotonic() - started < 5:  # a header line every 0.1 s
        try:
            sock.sendall(b"X-Slow: 1\r\n")
        except OSError:
            closed = True
        else:
            sock.settimeout(0.1)  # paces the header lines too
            with contextlib.suppress(TimeoutError):
                closed = sock.recv(4096) == b""

    assert closed, "still open after 5 s"
    assert 0.4 < time.monotonic() - started < 2, "closed at the deadline, not per receive"
    wait_until(lambda: refused(metrics, "deadline") == 1, 5, 0.01, "the deadline counted")


def test_queries_beyond_max_requests_get_a_503_while_probes_are_answered(
    topology: BuiltTopology, box: StatusBox, stack: ExitStack
) -> None:
    router = BlockingRouter(topology, box)
    metrics = Metrics()
    server = serve(box, router, HttpLimits(max_requests=1), metrics)
    stack.callback(server.stop)
    stack.callback(router.release.set)
    holder = threading.Thread(target=status_of, args=(server.port, "/tasks", 15), daemon=True)
    holder.start()
    assert router.entered.acquire(timeout=5), "the first query never started"

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("GET", "/stores/counts/keys/k")
    answer = connection.getresponse()
    body = answer.read()
    connection.close()

    assert answer.status == 503
    assert answer.getheader("Retry-After") == "1"
    assert b"http.max.requests" in body
    assert refused(metrics, "requests") == 1
    assert status_of(server.port, "/healthz") in (200, 503)  # answered: no slot taken
    assert status_of(server.port, "/readyz") in (200, 503)
    assert status_of(server.port, "/metrics") == 200
    router.release.set()
    holder.join(10)
    assert status_of(server.port, "/tasks") == 200  # the slot came back


def healthz_ms(port: int) -> float:
    status, ms = healthz(port)
    assert status in (200, 503)  # answered (the box's status may be either)
    return ms


def test_healthz_stays_under_100_ms_with_hundreds_of_idle_and_slow_connections_and_a_query_burst(
    topology: BuiltTopology, box: StatusBox, stack: ExitStack
) -> None:
    server = HttpServer(
        "127.0.0.1",
        0,
        Metrics(),
        box,
        QueryRouter(topology, box),
        limits=HttpLimits(socket_timeout_s=30),
        management_port=0,
    )
    server.start()
    stack.callback(server.stop)
    assert server.management_port is not None
    for _ in range(250):
        idle_socket(server.port, stack)
    for _ in range(50):  # slow: a request line, then nothing
        idle_socket(server.port, stack, b"GET /tasks HTTP/1.1\r\nHost: x\r\n")
    for _ in range(100):  # the management port is no less exposed
        idle_socket(server.management_port, stack)
    wait_until(lambda: server.connections >= 300, 20, 0.05, lambda: f"{server.connections}")
    burst = start_burst(stack, server.port)

    probes = [healthz_ms(server.management_port) for _ in range(200)]
    on_the_query_port = [healthz_ms(server.port) for _ in range(50)]

    assert burst.poll() is None, "the burst ran all along"
    assert statistics.median(probes) < 20, probes
    assert percentile(probes, 0.99) < 100, sorted(probes)[-5:]  # the max: one delay
    # Behind the query burst's accept queue, but never a dropped SYN (1 s, then 3 s).
    assert max(on_the_query_port) < 1000, sorted(on_the_query_port)[-5:]
