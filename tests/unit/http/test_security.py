"""Who may use the query API: tokens, client certificates, loopback; and the config errors
of the token and TLS files, which never show the token."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tests.support.certificates import Certificates, make_certificates
from worker.config import Settings, load
from worker.errors import ConfigError
from worker.http.security import Access, http_security

TOKEN = "s3cr3t-token-0123456789abcdef"


def settings(**values: str) -> Settings:
    return load(overrides={k.replace("_", "."): v for k, v in values.items()}, environ={}).settings


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def test_the_right_bearer_token_passes_and_any_other_is_a_401() -> None:
    access = http_security(settings(http_auth_token=TOKEN)).access

    assert access.check(f"Bearer {TOKEN}", None) is None
    assert access.check(f"bearer {TOKEN}", None) is None  # the scheme is case-insensitive
    for presented in (None, "", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ", TOKEN):
        reply = access.check(presented, None)
        assert reply is not None and reply.status == 401, presented
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")
        assert TOKEN not in str(reply.body)


def test_a_token_is_needed_on_loopback_too_once_it_is_configured() -> None:
    access = http_security(settings(http_host="127.0.0.1", http_auth_token=TOKEN)).access

    reply = access.check(None, None)

    assert reply is not None and reply.status == 401


def test_without_credentials_the_api_is_open_on_loopback_and_off_elsewhere() -> None:
    assert http_security(settings(http_host="127.0.0.1")).access.check(None, None) is None
    assert http_security(settings(http_host="::1")).access.check(None, None) is None

    reply = http_security(settings(http_host="0.0.0.0")).access.check(None, None)

    assert reply is not None and reply.status == 403
    assert "http.auth.token" in reply.body["error"]


def test_unauthenticated_access_off_loopback_must_be_asked_for() -> None:
    open_ = settings(http_host="0.0.0.0", http_query_unauthenticated="true")

    assert http_security(open_).access.check(None, None) is None


def test_a_verified_client_certificate_passes_without_a_token() -> None:
    access = Access(token=TOKEN.encode(), client_certificates=True, open=False)

    assert access.check(None, {"subject": ((("commonName", "member"),),)}) is None
    reply = access.check(None, {})  # no certificate presented (getpeercert() is empty)
    assert reply is not None and reply.status == 401


def test_the_token_is_read_from_a_file_without_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")

    access = http_security(settings(http_auth_file=str(path))).access

    assert access.check(f"Bearer {TOKEN}", None) is None
    assert TOKEN not in repr(access)


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"http_auth_token": "short"}, "http.auth.token"),
        ({"http_auth_token": "has spaces in the middle of it"}, "http.auth.token"),
        ({"http_auth_file": "/nonexistent/token"}, "http.auth.file"),
        ({"http_auth_token": TOKEN, "http_auth_file": "/x"}, "http.auth.file"),
        ({"http_tls_cert_file": "/x.pem"}, "http.tls.key.file"),
        ({"http_tls_key_file": "/x.key"}, "http.tls.cert.file"),
        ({"http_tls_ca_file": "/ca.pem"}, "http.tls.ca.file"),
        ({"http_tls_cert_file": "/x.pem", "http_tls_key_file": "/x.key"}, "http.tls.cert.file"),
    ],
)
def test_bad_token_and_tls_settings_are_config_errors_naming_the_key(
    values: dict[str, str], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        http_security(settings(**values))

    assert caught.value.key == key
    assert "short" not in str(caught.value) and "spaces" not in str(caught.value)


def test_an_empty_token_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")

    with pytest.raises(ConfigError, match="http.auth.file"):
        http_security(settings(http_auth_file=str(tmp_path / "token")))


def test_the_token_stays_out_of_the_settings_repr_and_dump() -> None:
    loaded = load(environ={"WORKER_HTTP_AUTH_TOKEN": TOKEN})

    assert loaded.settings.http_auth_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(loaded.settings)
    assert TOKEN not in str(loaded.settings.model_dump(by_alias=True))


def test_tls_settings_build_a_server_context_and_an_https_peer(
    certificates: Certificates,
) -> None:
    security = http_security(
        settings(
            http_tls_cert_file=str(certificates.cert),
            http_tls_key_file=str(certificates.key),
            http_tls_ca_file=str(certificates.ca),
            http_auth_token=TOKEN,
        )
    )

    assert security.server_context is not None
    assert security.server_context.verify_mode == ssl.CERT_OPTIONAL  # probes need no cert
    assert security.scheme == security.peer.scheme == "https"
    assert security.peer.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(security)


def test_a_key_that_does_not_match_the_certificate_is_an_error(
    certificates: Certificates,
) -> None:
    mismatched = settings(
        http_tls_cert_file=str(certificates.cert), http_tls_key_file=str(certificates.stranger_key)
    )

    with pytest.raises(ConfigError, match="http.tls.cert.file"):
        http_security(mismatched)


@pytest.mark.parametrize(
    ("access", "mode"),
    [
        (Access(token=b"t" * 16), "token"),
        (Access(client_certificates=True, open=False), "client certificate"),
        (Access(token=b"t" * 16, client_certificates=True), "token or client certificate"),
        (Access(open=True), "open"),
        (Access(open=False), "off"),
    ],
)
def test_the_start_up_line_says_what_opens_the_query_api(access: Access, mode: str) -> None:
    assert access.mode == mode
