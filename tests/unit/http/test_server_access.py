"""The query API over real sockets: tokens, a closed API, the management port, TLS and
mutual TLS; probes and metrics answer without credentials throughout."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.certificates import Certificates, make_certificates
from tests.unit.http.conftest import ME, StatusBox, Stores, snapshot
from worker.config import load
from worker.http.directory import RoutingUnavailable, fetch_routing
from worker.http.peer import Peer
from worker.http.queries import QueryRouter
from worker.http.security import Access, HttpSecurity, http_security
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology

TOKEN = "0123456789abcdef0123456789abcdef"
PUBLIC = ("/healthz", "/readyz", "/metrics")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def start(
    topology: BuiltTopology, box: StatusBox, security: HttpSecurity, management: bool = False
) -> HttpServer:
    router = QueryRouter(topology, box, scheme=security.scheme)
    server = HttpServer(
        "127.0.0.1", 0, Metrics(), box, router, security, management_port=0 if management else None
    )
    server.start()
    return server


@pytest.fixture
def servers() -> Iterator[list[HttpServer]]:
    started: list[HttpServer] = []
    yield started
    for server in started:
        server.stop()


def status_of(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> int:
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_with_a_token_queries_need_it_and_probes_do_not(
    topology: BuiltTopology, box: StatusBox, servers: list[HttpServer]
) -> None:
    security = http_security(load(overrides={"http.auth.token": TOKEN}, environ={}).settings)
    server = start(topology, box, security)
    servers.append(server)

    assert status_of(server.port, "/tasks") == 401
    assert status_of(server.port, "/tasks", {"Authorization": "Bearer nope-nope-nope-nope"}) == 401
    assert status_of(server.port, "/stores/counts/keys/k") == 401
    assert status_of(server.port, "/no/such/path") == 401  # nothing is told before the token
    assert status_of(server.port, "/tasks", {"Authorization": f"Bearer {TOKEN}"}) == 200
    for path in PUBLIC:
        assert status_of(server.port, path) in (200, 503), path


def test_a_closed_query_api_answers_403_and_probes_still_answer(
    topology: BuiltTopology, box: StatusBox, servers: list[HttpServer]
) -> None:
    server = start(topology, box, HttpSecurity(Access(open=False, off_reason="not loopback")))
    servers.append(server)

    assert status_of(server.port, "/tasks") == 403
    assert status_of(server.port, "/routing") == 403
    for path in PUBLIC:
        assert status_of(server.port, path) in (200, 503), path


def test_the_management_port_serves_probes_and_metrics_only(
    topology: BuiltTopology, box: StatusBox, servers: list[HttpServer]
) -> None:
    server = start(topology, box, HttpSecurity(), management=True)
    servers.append(server)
    assert server.management_port is not None and server.management_port != server.port

    assert status_of(server.management_port, "/metrics") == 200
    assert status_of(server.management_port, "/healthz") in (200, 503)
    assert status_of(server.management_port, "/tasks") == 404
    assert status_of(server.port, "/tasks") == 200


def tls_security(certificates: Certificates, token: str = "") -> HttpSecurity:
    values = {
        "http.tls.cert.file": str(certificates.cert),
        "http.tls.key.file": str(certificates.key),
        "http.tls.ca.file": str(certificates.ca),
    }
    if token:
        values["http.auth.token"] = token
    return http_security(load(overrides=values, environ={}).settings)


def client(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def test_over_tls_probes_need_no_certificate_and_queries_need_one_the_ca_signed(
    topology: BuiltTopology, box: StatusBox, servers: list[HttpServer], certificates: Certificates
) -> None:
    server = start(topology, box, tls_security(certificates))
    servers.append(server)
    anonymous = client(certificates.ca)
    member = client(certificates.ca, certificates.cert, certificates.key)
    stranger = client(certificates.ca, certificates.stranger_cert, certificates.stranger_key)

    assert status_of(server.port, "/healthz", context=anonymous) in (200, 503)
    assert status_of(server.port, "/metrics", context=anonymous) == 200
    assert status_of(server.port, "/tasks", context=anonymous) == 401
    assert status_of(server.port, "/tasks", context=member) == 200
    with pytest.raises((ssl.SSLError, ConnectionError)):
        status_of(server.port, "/tasks", context=stranger)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        status_of(server.port, "/healthz")  # plain HTTP on the TLS port: no answer
    assert status_of(server.port, "/healthz", context=anonymous) in (200, 503)  # still serving


@pytest.fixture
def tls_server(
    topology: BuiltTopology, box: StatusBox, servers: list[HttpServer], certificates: Certificates
) -> tuple[HttpServer, HttpSecurity]:
    """A TLS server asking for the token (or a certificate the CA signed)."""
    security = tls_security(certificates, token=TOKEN)
    server = start(topology, box, security)
    servers.append(server)
    return server, security


def test_members_fetch_the_routing_map_over_tls_with_their_certificate_and_token(
    tls_server: tuple[HttpServer, HttpSecurity],
    box: StatusBox,
    stores: Stores,
    certificates: Certificates,
) -> None:
    server, security = tls_server
    box.current = snapshot(stores, {"0_0": ("active", "running")}, {ME: ["0_0"]})
    endpoint = f"127.0.0.1:{server.port}"

    assert fetch_routing(endpoint, 5, security.peer)  # the map's bytes
    with pytest.raises(RoutingUnavailable):
        fetch_routing(endpoint, 5, Peer(client(certificates.ca)))  # neither cert nor token
    with pytest.raises(RoutingUnavailable):
        fetch_routing(endpoint, 5)  # plain HTTP


def test_a_redirect_over_tls_points_at_https(
    tls_server: tuple[HttpServer, HttpSecurity],
    box: StatusBox,
    stores: Stores,
    certificates: Certificates,
) -> None:
    server, _security = tls_server
    box.current = snapshot(stores, {}, {"10.0.0.9:8080": ["0_0", "0_1", "0_2", "0_3"]})
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, timeout=5, context=client(certificates.ca)
    )
    connection.request("GET", "/stores/counts/keys/k", headers={"Authorization": f"Bearer {TOKEN}"})
    response = connection.getresponse()
    response.read()
    connection.close()

    assert response.status == 307
    assert response.getheader("Location") == "https://10.0.0.9:8080/stores/counts/keys/k?hop=1"
