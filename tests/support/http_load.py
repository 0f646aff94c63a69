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
