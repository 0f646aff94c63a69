"""HttpServer over real sockets: paths, query strings, headers, status codes, JSON bodies."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from urllib.parse import quote

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.http.conftest import ME, OTHER, StatusBox, Stores, key_on, snapshot
from worker.clock import FakeClock
from worker.errors import FatalError
from worker.http.queries import QueryRouter
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.runtime.status import HEALTH_STALE_SECONDS, Status, WorkerState


@pytest.fixture
def server(topology: BuiltTopology, box: StatusBox) -> Iterator[HttpServer]:
    running = HttpServer("127.0.0.1", 0, Metrics(), box, QueryRouter(topology, box))
    running.start()
    yield running
    running.stop()


def get(server: HttpServer, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET without following redirects: (status, headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def get_json(server: HttpServer, path: str) -> tuple[int, dict[str, str], dict]:  # type: ignore[type-arg]
    status, headers, body = get(server, path)
    assert headers["Content-Type"] == "application/json"
    return status, headers, orjson.loads(body)


def test_metrics_are_prometheus_text(server: HttpServer) -> None:
    status, headers, body = get(server, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert "worker_tasks" in names


def test_healthz_answers_the_liveness_judged_on_the_worker_clock(
    server: HttpServer, box: StatusBox
) -> None:
    clock = FakeClock(now=1e9)  # far from time.monotonic(): a mix of clocks would show
    beat = Status(WorkerState.RUNNING, heartbeat=clock.monotonic())
    box.current = beat.judged(clock.monotonic())
    assert get_json(server, "/healthz")[0] == 200

    clock.advance(HEALTH_STALE_SECONDS + 1)
    box.current = beat.judged(clock.monotonic())

    code, _, body = get_json(server, "/healthz")
    assert (code, body["alive"]) == (503, False)


def test_healthz_is_503_in_error(server: HttpServer, box: StatusBox) -> None:
    clock = FakeClock()
    box.current = Status(WorkerState.ERROR, heartbeat=clock.monotonic()).judged(clock.monotonic())

    code, _, body = get_json(server, "/healthz")

    assert (code, body) == (503, {"alive": False, "state": "error"})


def test_readyz_is_503_while_rebalancing_or_restoring_and_200_when_every_active_runs(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {"0_0": ("active", "running")}, state=WorkerState.REBALANCING)
    assert get_json(server, "/readyz")[0] == 503
    box.current = snapshot(stores, {"0_0": ("active", "restoring")})
    assert get_json(server, "/readyz")[0] == 503
    box.current = snapshot(stores, {"0_0": ("active", "running"), "0_1": ("standby", "running")})
    code, _, body = get_json(server, "/readyz")
    assert code == 200
    assert body["tasks"] == [
        {"task_id": "0_0", "kind": "active", "state": "running"},
        {"task_id": "0_1", "kind": "standby", "state": "running"},
    ]


@pytest.mark.parametrize("query", ["", "?hop=1"])  # the hop marker is no lookup parameter
def test_a_key_lookup_answers_json_with_the_routing_headers(
    server: HttpServer, box: StatusBox, stores: Stores, query: str
) -> None:
    key = key_on(1)
    stores.put("counts", key.encode(), b'{"count":2}')
    box.current = snapshot(stores, {"0_1": ("active", "running")}, {ME: ["0_1"]})
    code, headers, body = get_json(server, f"/stores/counts/keys/{key}{query}")
    assert (code, body["value"]) == (200, {"count": 2})
    assert headers["X-Worker-Task"] == "0_1"


def test_a_redirect_carries_the_other_endpoint_and_keeps_path_and_query(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {}, {OTHER: ["0_0", "0_1", "0_2", "0_3"]})
    raw = "/stores/counts/keys/" + quote("a b/c", safe="") + "?allow_stale=false"
    code, headers, body = get_json(server, raw)
    assert code == 307
    assert headers["Location"] == f"http://{OTHER}{raw}&hop=1"  # the hop marker
    assert body["redirect"] == headers["Location"]


def test_percent_encoded_keys_are_decoded_once(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    key = "a b/ü+%"
    stores.put("counts", key.encode(), b"1")
    box.current = snapshot(stores, {t: ("active", "running") for t in ("0_0", "0_1", "0_2", "0_3")},
                           {ME: ["0_0", "0_1", "0_2", "0_3"]})  # fmt: skip
    code, _, body = get_json(server, "/stores/counts/keys/" + quote(key, safe=""))
    assert (code, body["key"], body["value"]) == (200, key, 1)


@pytest.mark.parametrize(
    ("query", "stale"),
    [("allow_stale=true", True), ("allow_stale", True), ("allow_stale=1", True), ("", False)],
)
def test_allow_stale_is_a_boolean_flag(
    server: HttpServer, box: StatusBox, stores: Stores, query: str, stale: bool
) -> None:
    box.current = snapshot(stores, {"0_2": ("standby", "running", 0)}, {OTHER: ["0_2"]})
    code, _, _ = get_json(server, f"/stores/counts/keys/{key_on(2)}?{query}")
    assert code == (404 if stale else 307)  # answered here (key absent) or redirected


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/stores/counts/keys/k?allow_stale=maybe", 400),
        ("/stores/counts/keys/k?limit=3", 400),
        ("/stores/counts/keys/%ff", 400),
        ("/stores/tags/keys/unquoted", 400),
        ("/stores/nope/keys/k", 404),
        ("/stores/counts/keys", 404),
        ("/stores/counts/keys/a/b", 404),
        ("/elsewhere", 404),
    ],
)
def test_bad_requests_get_a_json_error(server: HttpServer, path: str, code: int) -> None:
    status, _, body = get_json(server, path)
    assert status == code
    assert body["error"]


@pytest.mark.parametrize(
    "query",
    [
        "allow_stale=true&allow_stale=false",
        "allow_stale=true&allow_stale=true",
    ],
)
def test_a_repeated_query_parameter_is_a_400_naming_it(server: HttpServer, query: str) -> None:
    status, _, body = get_json(server, f"/stores/counts/keys/k?{query}")

    assert status == 400
    assert "'allow_stale'" in body["error"] and "more than once" in body["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/stores/counts/keys/k?allow_stale=" + "x" * 5000,
        "/stores/counts/keys/k?" + "y" * 5000 + "=1",
        "/stores/counts/range?from=" + "%22" + "z" * 5000 + "&limit=" + "9" * 5000,
        "/stores/counts/keys/" + "%ff" * 1000,
    ],
    ids=["value", "name", "range", "key"],
)
def test_a_400_repeats_at_most_a_short_prefix_of_what_it_refuses(
    server: HttpServer, path: str
) -> None:
    status, _, body = get_json(server, path)

    assert status == 400
    assert len(body["error"]) <= 220, body["error"]
    assert "x" * 100 not in body["error"] and "y" * 100 not in body["error"]


def test_tasks_is_json(server: HttpServer, box: StatusBox, stores: Stores) -> None:
    box.current = snapshot(stores, {"0_0": ("active", "running")}, {ME: ["0_0"]})
    code, _, body = get_json(server, "/tasks")
    assert code == 200
    assert [t["task_id"] for t in body["tasks"]] == ["0_0"]
    assert body["tasks"][0]["unavailable_seconds"] == {}


def test_without_a_router_only_the_health_endpoints_exist(box: StatusBox) -> None:
    plain = HttpServer("127.0.0.1", 0, Metrics(), box)
    plain.start()
    try:
        assert get(plain, "/tasks")[0] == 404
        assert get(plain, "/stores/counts/keys/k")[0] == 404
        assert get(plain, "/healthz")[0] in (200, 503)
    finally:
        plain.stop()


def test_a_port_in_use_is_a_fatal_error_naming_http_port(
    server: HttpServer, box: StatusBox
) -> None:
    with pytest.raises(FatalError, match=r"http\.port: cannot listen on 127\.0\.0\.1:\d+"):
        HttpServer("127.0.0.1", server.port, Metrics(), box)


def raw_exchange(server: HttpServer, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` bytes as they are; (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    if not answer.startswith(b"HTTP/"):
        return 0, {}, answer  # an HTTP/0.9 answer: the body alone
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


def test_a_raw_utf8_key_means_the_same_key_as_its_percent_encoding(
    server: HttpServer, box: StatusBox, stores: Stores
) -> None:
    key = "ü-" + key_on(0)
    stores.put("counts", key.encode(), b"3")
    box.current = snapshot(stores, {t: ("active", "running") for t in ("0_0", "0_1", "0_2", "0_3")},
                           {ME: ["0_0", "0_1", "0_2", "0_3"]})  # fmt: skip

    raw = raw_exchange(server, b"GET /stores/counts/keys/" + key.encode() + b" HTTP/1.0\r\n\r\n")
    encoded = get_json(server, "/stores/counts/keys/" + quote(key, safe=""))

    assert (raw[0], orjson.loads(raw[2])["key"]) == (200, key)
    assert encoded[2]["key"] == key


@pytest.mark.parametrize(
    "target",
    [b"/stores/counts/keys/%zz", b"/stores/counts/keys/a%2", b"/stores/counts/keys/\xff\xfe",
     b"/stores/counts/keys/k?allow_stale=%zz", b"/stores/counts/range?from=%ff"],
)  # fmt: skip
def test_bad_escapes_and_bytes_that_are_not_utf8_are_a_json_400(
    server: HttpServer, target: bytes
) -> None:
    status, headers, body = raw_exchange(server, b"GET " + target + b" HTTP/1.0\r\n\r\n")

    assert status == 400
    assert headers["Content-Type"] == "application/json"
    assert orjson.loads(body)["error"]


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"GET /" + b"a" * 70000 + b" HTTP/1.0\r\n\r\n", 414),
        (b"POST /tasks HTTP/1.0\r\nContent-Length: 0\r\n\r\n", 501),
        (b"BREW /pot HTTP/1.0\r\n\r\n", 501),
        (b"GET /tasks HTTP/1.x\r\n\r\n", 0),  # no version: answered as HTTP/0.9
        (b"GET / HTTP/9.9\r\n\r\n", 0),
        (b"nonsense\r\n\r\n", 0),
    ],
)
def test_the_standard_librarys_own_errors_are_json_too(
    server: HttpServer, request_bytes: bytes, code: int
) -> None:
    status, headers, body = raw_exchange(server, request_bytes)

    assert status == code
    assert headers.get("Content-Type", "application/json") == "application/json"
    assert orjson.loads(body)["error"]


@pytest.mark.parametrize("marker", ["query", "header"])
def test_a_request_redirected_once_is_never_redirected_again(
    server: HttpServer, box: StatusBox, stores: Stores, marker: str
) -> None:
    box.current = snapshot(stores, {}, {OTHER: ["0_0", "0_1", "0_2", "0_3"]})
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    if marker == "query":
        connection.request("GET", "/stores/counts/keys/k?allow_stale=false&hop=1")
    else:
        connection.request("GET", "/stores/counts/keys/k", headers={"X-Worker-Hop": "1"})
    response = connection.getresponse()
    body = orjson.loads(response.read())
    connection.close()

    assert response.status == 503
    assert response.getheader("Retry-After") == "1"
    assert response.getheader("Location") is None
    assert body["endpoint"] == OTHER and "misrouted" in body["error"]
