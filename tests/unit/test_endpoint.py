"""application.server is parsed strictly: only a host and a port can end up in a redirect."""

from __future__ import annotations

import pytest

from worker.config import load
from worker.endpoint import BadEndpoint, Endpoint, is_loopback, parse_endpoint
from worker.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("worker-0.worker.ns.svc.cluster.local:8080", Endpoint("worker-0.worker.ns.svc.cluster.local", 8080)),
        ("127.0.0.1:1", Endpoint("127.0.0.1", 1)),
        ("[::1]:65535", Endpoint("::1", 65535)),
        ("[2001:db8::7]:8080", Endpoint("2001:db8::7", 8080)),
        ("host_a:80", Endpoint("host_a", 80)),
    ],
)  # fmt: skip
def test_host_port_and_bracketed_v6_are_endpoints(text: str, expected: Endpoint) -> None:
    parsed = parse_endpoint(text)

    assert parsed == expected
    assert str(parsed) == text


@pytest.mark.parametrize(
    "text",
    [
        "no-port",
        "host:",
        ":8080",
        "host:0",
        "host:99999",
        "host:65536",
        "host:+80",
        "host:8o",
        "evil.com/@x:80",
        "user@host:80",
        "host/path:80",
        "host?q:80",
        "host#f:80",
        "ho st:80",
        "::1:80",
        "[::1]80",
        "[not-v6]:80",
        "[::1]:",
        "[fe80::1%eth0]:80",
        "-host:80",
        "a..b:80",
        "http://host:80",
        "höst:80",
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(BadEndpoint):
        parse_endpoint(text)


@pytest.mark.parametrize("value", ["host:99999", "evil.com/@x:80", "[::1]", "a b:1"])
def test_a_bad_application_server_is_a_config_error_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={"application.server": value}, environ={})

    assert caught.value.key == "application.server"


def test_the_default_endpoint_brackets_an_ipv6_http_host() -> None:
    settings = load(overrides={"http.host": "::1", "http.port": "81"}, environ={}).settings

    assert settings.endpoint() == "[::1]:81"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("worker-0.example", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
