"""The request target: bytes as sent, strict percent-decoding, and the hop marker.

``http.server`` decodes the request line as Latin-1, so a raw (unencoded) ``ü`` sent as
UTF-8 arrives as ``Ã¼``. :func:`parse_target` takes the bytes back and percent-encodes
every non-ASCII byte, so raw and percent-encoded UTF-8 mean the same key, and both go
through one strict UTF-8 decoding (:func:`decode`): bytes that are not UTF-8 are a 400.
A ``%`` not followed by two hex digits (``%zz``) is a 400 too, never taken literally.

The hop marker keeps two instances with stale routing maps from redirecting a query
back and forth. Every redirect's ``Location`` carries ``hop=1`` in its query (clients
that follow a redirect repeat the URL, not response headers); a request that arrives
with it, or with the header ``X-Worker-Hop`` (for proxies and programs that forward
queries), is answered where it lands or gets a 503: it is never redirected again. The
marker is removed before the query parameters are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

HOP_PARAMETER = "hop"
HOP_HEADER = "X-Worker-Hop"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class BadTarget(ValueError):
    """The request target cannot be read; the message says why (a 400)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A request target: ASCII path and query (still percent-encoded), and whether the
    request was redirected or forwarded here already."""

    path: str
    query: str
    hopped: bool

    @property
    def redirect_origin(self) -> str:
        """Path and query for a redirect's ``Location``, with the hop marker."""
        marker = f"{HOP_PARAMETER}=1"
        return f"{self.path}?{self.query}&{marker}" if self.query else f"{self.path}?{marker}"


def parse_target(raw: str, hop_header: str | None = None) -> Target:
    """Read ``raw`` (the target as ``http.server`` decoded it, Latin-1); raises
    BadTarget for a malformed percent-escape."""
    ascii_target = "".join(c if ord(c) < 0x80 else f"%{ord(c):02X}" for c in raw)
    if _BAD_ESCAPE.search(ascii_target):
        raise BadTarget("a '%' must start an escape of two hex digits (write '%25' for '%')")
    parts = urlsplit(ascii_target)
    kept = []
    hopped = hop_header is not None
    for item in parts.query.split("&") if parts.query else []:
        if item.partition("=")[0] == HOP_PARAMETER:
            hopped = True
        else:
            kept.append(item)
    return Target(parts.path, "&".join(kept), hopped)


def decode(segment: str) -> str:
    """One percent-encoded path segment as text; raises UnicodeDecodeError (a 400) for
    bytes that are not UTF-8."""
    return unquote(segment, errors="strict")


ECHO_CHARS = 64  # what a 400 repeats of a value it refuses, at most


def echo(value: str) -> str:
    """``value`` as an error message repeats it: its first :data:`ECHO_CHARS`
    characters, quoted, and how long it was when it was longer (a 5,000-character
    parameter used to come back whole)."""
    if len(value) <= ECHO_CHARS:
        return repr(value)
    return f"{value[:ECHO_CHARS]!r}... ({len(value)} characters)"


def parameters(query: str) -> dict[str, str]:
    """The query's parameters, decoded strictly (UnicodeDecodeError: a 400).

    Raises:
        BadTarget: a parameter given more than once (which one counts is for the client
            to say, not for the server to guess).
    """
    found = parse_qs(query, keep_blank_values=True, errors="strict")
    repeated = sorted(name for name, values in found.items() if len(values) > 1)
    if repeated:
        names = ", ".join(echo(name) for name in repeated[:3])
        raise BadTarget(f"query parameters given more than once: {names}; give each once")
    return {name: values[0] for name, values in found.items()}
