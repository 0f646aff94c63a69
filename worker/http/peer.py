"""How one instance calls another: the scheme, TLS context and token of the group.

Used for ``GET /routing`` on the group's directory (:mod:`worker.http.directory`). The
members of a group share their HTTP settings, so an instance calls its peers the way it
is itself called: HTTPS when it serves HTTPS (verifying the peer against
``http.tls.ca.file`` or the system's CAs, presenting its own certificate for mutual
TLS), with ``Authorization: Bearer`` when a token is configured. The token is never
shown in a repr.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from worker.endpoint import parse_endpoint


@dataclass(frozen=True)
class Peer:
    """The client side of the group's HTTP settings (see the module doc)."""

    context: ssl.SSLContext | None = None
    token: str | None = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        return "http" if self.context is None else "https"

    def connection(self, endpoint: str, timeout: float) -> http.client.HTTPConnection:
        """An unopened connection to ``endpoint`` (``host:port`` or ``[v6]:port``).

        Raises ValueError (a :class:`~worker.endpoint.BadEndpoint`) for anything else.
        """
        parsed = parse_endpoint(endpoint)
        if self.context is not None:
            return http.client.HTTPSConnection(
                parsed.host, parsed.port, timeout=timeout, context=self.context
            )
        return http.client.HTTPConnection(parsed.host, parsed.port, timeout=timeout)

    def headers(self) -> Mapping[str, str]:
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
