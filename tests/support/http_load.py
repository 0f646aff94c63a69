"""Load for the HTTP bounds tests: a query burst from another process, probe timings.

The burst runs in its own interpreter: clients in the test's process would compete with
the server for the interpreter lock, which a real client never does.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from contextlib import ExitStack

BURST = """
import http.client, sys, threading, time
port, clients, deadline = int(sys.argv[1]), int(sys.argv[2]), time.monotonic() + 60
def hammer():
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/stores/counts/keys/k")
            connection.getresponse().read()
            print("answered", flush=True)
        except OSError:
            pass
        finally:
            connection.close()
for _ in range(clients):
    threading.Thread(target=hammer, daemon=True).start()
time.sleep(60)
"""


def start_burst(stack: ExitStack, port: int, clients: int = 60) -> subprocess.Popen[str]:
    """``clients`` threads in another process querying ``port`` without pause (at most
    60 s; killed when ``stack`` closes). Returns once the first answer came back."""
    burst = stack.enter_context(
        subprocess.Popen(
            [sys.executable, "-c", BURST, str(port), str(clients)],
            stdout=subprocess.PIPE,
            text=True,
        )
    )
    stack.callback(burst.kill)
    assert burst.stdout is not None and "answered" in burst.stdout.readline()
    return burst


SLOW_HEADERS = """
import socket, sys, threading, time
ports = [int(p) for p in sys.argv[1].split(",")]
clients, interval = int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + float(sys.argv[4])
def trickle(port):
    while time.monotonic() < deadline:
        sock = None
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /healthz HTTP/1.1\\r\\n")
            while time.monotonic() < deadline:
                time.sleep(interval)
                sock.sendall(b"X-Slow: 1\\r\\n")
        except OSError:
            pass  # closed by the server (deadline or eviction): connect again
        finally:
            if sock is not None:
                sock.close()
for port in ports:
    for _ in range(clients):
        threading.Thread(target=trickle, args=(port,), daemon=True).start()
print("started", flush=True)
time.sleep(max(0.0, deadline - time.monotonic()))
"""


def start_slow_headers(
    stack: ExitStack, ports: list[int], clients: int, interval_s: float, seconds: float
) -> subprocess.Popen[str]:
    """``clients`` connections per port in another process, each sending a request line
    and then one header line every ``interval_s``, never finishing, and connecting again
    whenever the server closes one, for ``seconds`` (killed when ``stack`` closes)."""
    args = [",".join(map(str, ports)), str(clients), str(interval_s), str(seconds)]
    slow = stack.enter_context(
        subprocess.Popen(
            [sys.executable, "-c", SLOW_HEADERS, *args], stdout=subprocess.PIPE, text=True
        )
    )
    stack.callback(slow.kill)
    assert slow.stdout is not None and "started" in slow.stdout.readline()
    return slow


def healthz(port: int) -> tuple[int, float]:
    """GET /healthz on loopback: (status, milliseconds it took)."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    return response.status, (time.perf_counter() - started) * 1000


def percentile(samples: list[float], fraction: float) -> float:
    """The sample below which ``fraction`` of ``samples`` lie (nearest rank): probes
    assert a high percentile, not the max, which one scheduling delay on a loaded shared
    machine decides."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, int(len(ordered) * fraction + 0.5) - 1))]
