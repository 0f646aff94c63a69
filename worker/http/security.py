"""Who may use the query API, and the TLS contexts of the HTTP server and its peers.

Two kinds of paths share one listener:

- **public**: ``/healthz``, ``/readyz`` and ``/metrics`` answer anyone, so kubelets
  and Prometheus need no credentials (nothing secret is in them: states, task ids,
  counters);
- **the query API**: everything else (``/stores/...``, ``/tasks``, ``/routing``) reads
  stored values, offsets and every instance's address. It is served when:

  1. a bearer token is configured (``http.auth.token``, best from the environment as
     ``WORKER_HTTP_AUTH_TOKEN``, or ``http.auth.file``) and the request carries
     ``Authorization: Bearer <token>`` (compared in constant time), or
  2. ``http.tls.ca.file`` is set and the client presented a certificate it signed
     (mutual TLS), or
  3. neither is configured and ``http.host`` is a loopback address (only this machine
     can connect), or ``http.query.unauthenticated = true`` says so explicitly.

  Otherwise it answers 401 (credentials missing or wrong) or 403 (the API is off: a
  non-loopback address and no credentials configured), always as JSON.

TLS (``http.tls.cert.file`` + ``http.tls.key.file``) covers both kinds of paths. With a
CA file the server asks for a client certificate without requiring one, so probes and
scrapes that have none still complete the handshake and reach the public paths.

Members call each other for the routing map (:mod:`worker.http.directory`): they use
HTTPS when this instance serves it, verify the peer against ``http.tls.ca.file`` (or the
system's CAs), present their own certificate, and send the token when one is set.

The token is never logged and never part of a repr or an error message.
"""

from __future__ import annotations

import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from worker.config import Settings
from worker.endpoint import is_loopback
from worker.errors import ConfigError
from worker.http.peer import Peer
from worker.http.queries import Reply

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
MIN_TOKEN_CHARS = 16
_DOCS = "docs/operations.md, 'Securing the HTTP API'"


@dataclass(frozen=True)
class Access:
    """Decides whether one request may reach the query API (see the module doc)."""

    token: bytes | None = field(default=None, repr=False)
    client_certificates: bool = False
    open: bool = True
    off_reason: str = ""

    @property
    def mode(self) -> str:
        """What opens the query API, for the start-up log line."""
        ways = [
            w
            for w, on in (("token", self.token), ("client certificate", self.client_certificates))
            if on
        ]
        if ways:
            return " or ".join(ways)
        return "open" if self.open else "off"

    def check(self, authorization: str | None, peer_certificate: object) -> Reply | None:
        """None when the request may be answered, else the 401/403 reply to send.

        ``peer_certificate`` is what ``SSLSocket.getpeercert()`` returned: a non-empty
        dict only for a certificate the CA verified.
        """
        if self.client_certificates and peer_certificate:
            return None
        if self.token is not None:
            scheme, _, presented = (authorization or "").partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(
                presented.strip().encode("utf-8", "replace"), self.token
            ):
                return None
            why = "wrong bearer token" if authorization else "a bearer token is required"
            return _unauthorized(why)
        if self.client_certificates:
            return _unauthorized("a client certificate signed by http.tls.ca.file is required")
        if self.open:
            return None
        return Reply(403, {"error": f"the query API is off: {self.off_reason}; see {_DOCS}"})


def _unauthorized(why: str) -> Reply:
    return Reply(401, {"error": why}, {"WWW-Authenticate": 'Bearer realm="worker"'})


@dataclass(frozen=True)
class HttpSecurity:
    """Access rules, the server's TLS context (None: plain HTTP) and the peer client."""

    access: Access = Access()
    server_context: ssl.SSLContext | None = None
    peer: Peer = Peer()

    @property
    def scheme(self) -> str:
        return self.peer.scheme


def http_security(settings: Settings) -> HttpSecurity:
    """Build the HTTP security from settings; raises ConfigError naming the key at fault
    (files that cannot be read, a short token, a certificate without its key...)."""
    token = _token(settings)
    server_context = _server_context(settings)
    certificates = bool(settings.http_tls_ca_file)
    loopback = is_loopback(settings.http_host)
    open_ = token is None and not certificates and (loopback or settings.http_query_unauthenticated)
    access = Access(
        token=None if token is None else token.encode(),
        client_certificates=certificates,
        open=open_,
        off_reason=(
            f"http.host {settings.http_host!r} is not a loopback address and neither "
            "http.auth.token nor http.tls.ca.file is set (or set "
            "http.query.unauthenticated = true)"
        ),
    )
    peer = Peer(None if server_context is None else _client_context(settings), token)
    return HttpSecurity(access, server_context, peer)


def _token(settings: Settings) -> str | None:
    inline = settings.http_auth_token.get_secret_value()
    path = settings.http_auth_file
    if inline and path:
        raise ConfigError("http.auth.file", "set http.auth.token or this, not both")
    key = "http.auth.file" if path else "http.auth.token"
    if path:
        try:
            inline = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(key, f"cannot read {path}: {_reason(exc)}") from None
        if not inline:
            raise ConfigError(key, f"{path} is empty")
    if not inline:
        return None
    if len(inline) < MIN_TOKEN_CHARS or not all(33 <= ord(c) <= 126 for c in inline):
        raise ConfigError(
            key,
            f"the token must be at least {MIN_TOKEN_CHARS} visible ASCII characters "
            "(e.g. the output of `openssl rand -hex 32`)",
        )
    return inline


def _server_context(settings: Settings) -> ssl.SSLContext | None:
    cert, key, ca = (
        settings.http_tls_cert_file,
        settings.http_tls_key_file,
        settings.http_tls_ca_file,
    )
    if not cert and not key:
        if ca:
            raise ConfigError(
                "http.tls.ca.file", "client certificates need TLS: set http.tls.cert.file too"
            )
        return None
    if not cert or not key:
        missing = "http.tls.key.file" if cert else "http.tls.cert.file"
        raise ConfigError(missing, "TLS needs both http.tls.cert.file and http.tls.key.file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert, key)
    if ca:
        _load_ca(context, ca)
        context.verify_mode = ssl.CERT_OPTIONAL  # probes without a certificate still pass
    return context


def _client_context(settings: Settings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=settings.http_tls_ca_file or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, settings.http_tls_cert_file, settings.http_tls_key_file)
    return context


def _load_chain(context: ssl.SSLContext, cert: str, key: str) -> None:
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            "http.tls.cert.file", f"cannot load {cert} with key {key}: {_reason(exc)}"
        ) from None


def _load_ca(context: ssl.SSLContext, ca: str) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("http.tls.ca.file", f"cannot load {ca}: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc)
