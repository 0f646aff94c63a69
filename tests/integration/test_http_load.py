"""A real worker under connection load: hundreds of idle and half-sent connections and a
burst of queries from another process; its probes still answer within 100 ms and its
threads come back once the idle connections time out."""

from __future__ import annotations

import socket
import statistics
from contextlib import ExitStack
from typing import Any

import pytest

from tests.integration.example_app import example_data
from tests.support.http_load import healthz, start_burst
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

IDLE_TIMEOUT_MS = 3000


def healthz_ms(port: int) -> float:
    status, ms = healthz(port)
    assert status == 200
    return ms


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("Threads:"))
    return int(line.split()[1])


def test_probes_stay_fast_and_threads_come_back_under_idle_connections_and_a_query_burst(
    own_broker: Any, worker_factory: Any, ports: Any
) -> None:
    example_data(own_broker.bootstrap, accounts=20)
    management = ports.take()
    worker = worker_factory(
        "w",
        settings={
            "bootstrap.servers": own_broker.bootstrap,
            "http.management.port": management,
            "http.socket.timeout.ms": IDLE_TIMEOUT_MS,
        },
    )
    worker.wait_ready(90)
    baseline = threads_of(worker.pid)
    with ExitStack() as stack:
        for port, count in ((worker.port, 300), (management, 100)):
            for n in range(count):
                sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), 10))
                if n % 6 == 0:
                    sock.sendall(b"GET /tasks HTTP/1.1\r\nHost: x\r\n")  # never finished
        wait_until(lambda: threads_of(worker.pid) >= baseline + 350, 20, 0.1, "connection threads")
        burst = start_burst(stack, worker.port)

        probes = [healthz_ms(management) for _ in range(100)]

        assert burst.poll() is None, "the burst ran all along"
        assert statistics.median(probes) < 20, probes
        assert max(probes) < 100, sorted(probes)[-5:]
        burst.kill()

        # The clients keep their sockets open: the worker closes them after
        # http.socket.timeout.ms of silence, and their threads end.
        wait_until(
            lambda: threads_of(worker.pid) <= baseline + 5,
            IDLE_TIMEOUT_MS / 1000 + 20,
            0.2,
            lambda: f"threads back to {baseline}: {threads_of(worker.pid)}",
        )
