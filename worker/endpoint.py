"""One instance's HTTP endpoint, ``host:port`` or ``[v6]:port``, parsed strictly.

The endpoint an instance advertises (``application.server``) ends up in other
instances' redirects (``Location: http://{endpoint}/...``) and in their requests for
the group's routing map, so whatever text it holds becomes a URL authority elsewhere.
Only a bare host and a port are accepted: a DNS name (letters, digits, ``-``, ``.``,
``_``), an IPv4 address, or an IPv6 address (without a zone) in brackets, then a port
1-65535. Userinfo (``evil.com/@x:80`` and ``a@b:80``), paths, queries, fragments,
spaces and an empty host are refused, so a member cannot send clients anywhere but to
a host and port.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")


class BadEndpoint(ValueError):
    """The text is not ``host:port`` / ``[v6]:port``; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A host (without brackets) and a port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{bracketed(self.host)}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """Parse ``host:port`` or ``[v6]:port``; raise :class:`BadEndpoint` otherwise."""
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise BadEndpoint("expected [ipv6]:port")
        try:
            scoped = ipaddress.IPv6Address(host).scope_id is not None
        except ValueError:
            raise BadEndpoint(f"{host!r} in brackets is not an IPv6 address") from None
        if scoped:  # a zone (%eth0) names this host's interface, meaningless elsewhere
            raise BadEndpoint(f"{host!r}: an IPv6 zone is not reachable from other hosts")
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise BadEndpoint("expected host:port (or [ipv6]:port)")
        if ":" in host:
            raise BadEndpoint("an IPv6 address must be in brackets: [ipv6]:port")
        if not _NAME.fullmatch(host) or ".." in host:
            raise BadEndpoint(
                f"{host!r} is not a host name or IPv4 address (no userinfo, path or spaces)"
            )
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise BadEndpoint(f"port {port!r} is not a number from 1 to 65535")
    return Endpoint(host, int(port))


def bracketed(host: str) -> str:
    """``host`` as it is written before ``:port`` in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host else host


def is_loopback(host: str) -> bool:
    """True when a server bound to ``host`` is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name that resolves elsewhere, or 0.0.0.0-like wildcards in words


WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})


def is_wildcard(host: str) -> bool:
    """True for an address that binds every interface: never one others can reach."""
    return host in WILDCARDS
