"""Two real workers with a secured query API: a bearer token over plain HTTP, then TLS
with client certificates and the token. Probes and metrics answer without credentials;
queries without them get a 401; the members route to each other with their credentials;
a redirected query is never redirected twice; bad security settings exit 2."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from tests.integration.example_app import ExampleData, example_data
from tests.support.certificates import Certificates, make_certificates
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = pytest.mark.integration

TOKEN = "integration-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
TOTALS = "account-totals"


def call(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], Any]:
    """GET on 127.0.0.1:port without following redirects: (status, headers, JSON or bytes)."""
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        raw = response.read()
        found = dict(response.getheaders())
    finally:
        connection.close()
    body = orjson.loads(raw) if found.get("Content-Type") == "application/json" else raw
    return response.status, found, body


def port_of(worker: WorkerProcess) -> int:
    port = wait_until(lambda: worker.port, 60, message=f"{worker.name}'s HTTP port")
    return int(port)


def a_redirect(
    a: WorkerProcess, data: ExampleData, headers: dict[str, str], context: ssl.SSLContext | None
) -> tuple[str, dict[str, str]]:
    """A key lookup that ``a`` redirects to the other worker: (path, response headers).

    Waits for the routing map, which ``a`` may have to fetch from the other worker (with
    its credentials) when that one is the group's directory.
    """

    def find() -> tuple[str, dict[str, str]] | None:
        for account in sorted(data.profiles):
            path = f"/stores/{TOTALS}/keys/{account}"
            status, found, _ = call(port_of(a), path, headers, context)
            if status == 307:
                return path, found
        return None

    return wait_until(find, 60, 0.5, "a key whose task is active on the other worker")


@pytest.fixture
def data(own_broker: Any) -> ExampleData:
    return example_data(own_broker.bootstrap, accounts=40)


def two_workers(
    worker_factory: Any,
    own_broker: Any,
    settings: dict[str, object],
    env: dict[str, str],
    only_a: dict[str, object] | None = None,
) -> list[WorkerProcess]:
    merged = {"bootstrap.servers": own_broker.bootstrap, "commit.interval.ms": 200, **settings}
    return [
        worker_factory("a", settings={**merged, **(only_a or {})}, env=env),
        worker_factory("b", settings=merged, env=env),
    ]


def test_with_a_token_queries_need_it_probes_do_not_and_members_route_with_it(
    own_broker: Any, worker_factory: Any, data: ExampleData, ports: Any
) -> None:
    management = ports.take()
    a, b = two_workers(
        worker_factory,
        own_broker,
        {},
        {"WORKER_HTTP_AUTH_TOKEN": TOKEN},
        only_a={"http.management.port": management},
    )
    for worker in (a, b):
        worker.wait_ready(90)  # /readyz needs no token
    data.produce(200)

    assert call(port_of(a), "/tasks")[0] == 401
    assert call(port_of(a), "/stores/account-totals/keys/x")[0] == 401
    assert call(port_of(a), "/tasks", {"Authorization": "Bearer wrong-wrong-wrong-wrong"})[0] == 401
    assert call(port_of(a), "/tasks", BEARER)[0] == 200
    assert call(port_of(a), "/metrics")[0] == 200
    assert call(management, "/healthz")[0] == 200
    assert call(management, "/metrics")[0] == 200
    assert call(management, "/tasks", BEARER)[0] == 404  # the query API is not there
    assert TOKEN not in a.log_path.read_text()

    path, found = a_redirect(a, data, BEARER, None)
    target = urlsplit(found["Location"])
    assert target.netloc == f"127.0.0.1:{port_of(b)}"
    status, _, body = call(port_of(b), f"{target.path}?{target.query}", BEARER)
    assert status in (200, 404), body  # answered where it was sent (404: no payment yet)
    # The same hop-marked request sent back to a, which would redirect it again: refused.
    status, headers, body = call(port_of(a), f"{target.path}?{target.query}", BEARER)
    assert status == 503 and "misrouted" in body["error"], body
    assert headers["Retry-After"] == "1"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def tls_client(certificates: Certificates, with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certificates.ca))
    if with_certificate:
        context.load_cert_chain(str(certificates.cert), str(certificates.key))
    return context


def ready_over_tls(worker: WorkerProcess, context: ssl.SSLContext) -> bool:
    if not worker.alive:
        raise AssertionError(f"{worker.name} exited with {worker.returncode}")
    try:
        return call(port_of(worker), "/readyz", context=context)[0] == 200
    except OSError:
        return False  # not listening yet


def test_over_tls_a_client_certificate_or_the_token_opens_the_query_api(
    own_broker: Any, worker_factory: Any, data: ExampleData, certificates: Certificates
) -> None:
    tls = {
        "http.tls.cert.file": str(certificates.cert),
        "http.tls.key.file": str(certificates.key),
        "http.tls.ca.file": str(certificates.ca),
    }
    a, b = two_workers(worker_factory, own_broker, tls, {"WORKER_HTTP_AUTH_TOKEN": TOKEN})
    anonymous = tls_client(certificates, with_certificate=False)
    member = tls_client(certificates, with_certificate=True)
    for worker in (a, b):
        wait_until(lambda w=worker: ready_over_tls(w, anonymous), 90, 0.5, f"{worker.name} ready")  # type: ignore[misc]

    assert call(port_of(a), "/metrics", context=anonymous)[0] == 200
    assert call(port_of(a), "/tasks", context=anonymous)[0] == 401
    assert call(port_of(a), "/tasks", BEARER, context=anonymous)[0] == 200
    assert call(port_of(a), "/tasks", context=member)[0] == 200
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        call(port_of(a), "/healthz")  # plain HTTP on the TLS port

    # The members fetch the routing map from each other over TLS with their certificate.
    _path, found = a_redirect(a, data, {}, member)
    target = urlsplit(found["Location"])
    assert (target.scheme, target.netloc) == ("https", f"127.0.0.1:{port_of(b)}")
    status, _, body = call(port_of(b), f"{target.path}?{target.query}", context=member)
    assert status in (200, 404), body


def run_worker(tmp_path: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    args = [arg for pair in sets for arg in ("--set", pair)]
    return subprocess.run(
        [sys.executable, "-m", "worker", "start", "--state-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (("http.auth.token=too-short",), "http.auth.token"),
        (("http.auth.file=/nonexistent/token",), "http.auth.file"),
        (("http.tls.cert.file=/nonexistent/cert.pem",), "http.tls.key.file"),
        (("application.server=evil.com/@x:80",), "application.server"),
        (("application.server=worker-0:99999",), "application.server"),
    ],
)
def test_bad_http_security_settings_exit_2_naming_the_key(
    tmp_path: Path, sets: tuple[str, ...], key: str
) -> None:
    result = run_worker(tmp_path, "bootstrap.servers=127.0.0.1:1", *sets)

    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert key in line
    assert "too-short" not in result.stderr


HANDSHAKE_DEADLINE_MS = 1500


def test_both_listeners_serve_tls_and_mutual_tls_live(
    own_broker: Any, worker_factory: Any, data: ExampleData, certificates: Certificates, ports: Any
) -> None:
    """One worker with TLS on ``http.port`` and ``http.management.port``: each answers over
    TLS with and without a client certificate (mutual TLS) and refuses plain HTTP and a
    certificate of another CA; the query API opens to the certificate on the query port
    only; a client that connects and never starts its handshake is closed at the request
    deadline, not after the (longer) socket timeout."""
    management = ports.take()
    worker = worker_factory(
        "tls",
        settings={
            "bootstrap.servers": own_broker.bootstrap,
            "http.tls.cert.file": str(certificates.cert),
            "http.tls.key.file": str(certificates.key),
            "http.tls.ca.file": str(certificates.ca),
            "http.management.port": management,
            "http.request.timeout.ms": HANDSHAKE_DEADLINE_MS,
        },
    )
    anonymous = tls_client(certificates, with_certificate=False)
    mutual = tls_client(certificates, with_certificate=True)
    stranger = ssl.create_default_context(cafile=str(certificates.ca))
    stranger.load_cert_chain(str(certificates.stranger_cert), str(certificates.stranger_key))
    wait_until(lambda: ready_over_tls(worker, anonymous), 90, 0.5, "ready over TLS")

    for port in (port_of(worker), management):
        for context in (anonymous, mutual):
            assert call(port, "/healthz", context=context)[0] == 200
            assert call(port, "/metrics", context=context)[0] == 200
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            call(port, "/healthz")  # plain HTTP on a TLS port
        with pytest.raises((ssl.SSLError, ConnectionError)):
            call(port, "/healthz", context=stranger)
    assert call(port_of(worker), "/tasks", context=anonymous)[0] == 401  # no credentials
    assert call(port_of(worker), "/tasks", context=mutual)[0] == 200
    assert call(management, "/tasks", context=mutual)[0] == 404  # probes and metrics only

    for port in (port_of(worker), management):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
            started = time.monotonic()
            assert silent.recv(1) == b"", "closed by the worker"
            waited = time.monotonic() - started
        assert waited < HANDSHAKE_DEADLINE_MS / 1000 + 2, f"closed after {waited:.1f} s"
    assert call(management, "/healthz", context=anonymous)[0] == 200
