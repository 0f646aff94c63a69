"""The group's routing map, fetched on demand from the member that holds it.

With user data version 2 (:mod:`worker.assignment.model`) the leader puts the group's
host maps (which endpoint runs which task as active, as standby) into one assignment
only: the *directory*'s, the member with the lowest client key that has an endpoint.
Every other assignment names the directory's endpoint, and the directory serves the map
at ``GET /routing``. An instance that must route a query to another one, or list the
maps in ``/tasks``, asks :class:`RoutingDirectory` to fill in its routing snapshot:

1. The snapshot already has maps (it is the directory, or the group runs version 1,
   whose assignments all carry them), or names no directory: it is used as it is.
2. A map of this generation (or a newer one) fetched earlier: used from the cache.
3. Otherwise one ``GET /routing`` on the directory (at most one at a time, bounded by
   ``timeout``). A map older than this instance's generation (the directory has not
   applied the new assignment yet) or a failure leaves the maps empty: the query then
   answers 503 and its client retries. After a failure the directory is not asked again
   for ``retry_seconds``, so a dead directory costs each query nothing until the group
   rebalances (and names another one).

Why not a topic or the broker: a compacted internal topic would need creating,
authorising and a producer and a consumer per process for data that lives one
generation; DescribeGroups would move the whole group's metadata to every member (and
the test broker answers it without members). The map already exists once, in the
directory's assignment; this serves it from there.

Thread-safety: :meth:`RoutingDirectory.resolve` may be called from any number of HTTP
threads; fetches are serialised by a lock, the cache is replaced by reference.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from worker.assignment.model import UserDataError, decode_routing
from worker.http.peer import Peer
from worker.observability import get_logger
from worker.runtime.status import Routing

ROUTING_PATH = "/routing"
FETCH_TIMEOUT_SECONDS = 2.0
RETRY_SECONDS = 1.0
# The routing map of a thousand members and ten thousand tasks is ~60 KB; anything far
# larger is not a routing map.
MAX_MAP_BYTES = 16 * 1024 * 1024
PLAIN = Peer()


class RoutingUnavailable(Exception):
    """The directory could not be asked, or answered with something that is not a map."""


Fetch = Callable[[str, float], bytes]


def fetch_routing(endpoint: str, timeout: float, peer: Peer = PLAIN) -> bytes:
    """``GET /routing`` on ``endpoint`` (host:port) as ``peer`` says (HTTPS, token);
    raises RoutingUnavailable."""
    try:
        connection = peer.connection(endpoint, timeout)
        try:
            connection.request("GET", ROUTING_PATH, headers=dict(peer.headers()))
            response = connection.getresponse()
            body = response.read(MAX_MAP_BYTES + 1)
        finally:
            connection.close()
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise RoutingUnavailable(f"{endpoint}{ROUTING_PATH}: {exc!r}") from exc
    if response.status != 200 or len(body) > MAX_MAP_BYTES:
        raise RoutingUnavailable(f"{endpoint}{ROUTING_PATH} answered {response.status}")
    return body


class RoutingDirectory:
    """Fills a routing snapshot's host maps from the group's directory (see module doc)."""

    def __init__(
        self,
        fetch: Fetch = fetch_routing,
        timeout: float = FETCH_TIMEOUT_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._timeout = timeout
        self._retry_seconds = retry_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: Routing | None = None  # the newest map fetched (its generation)
        self._failed_at: dict[str, float] = {}  # directory -> when asking it last failed
        self._log = get_logger(component="http")

    def resolve(self, routing: Routing) -> Routing:
        """``routing`` with the group's host maps, or as it is when they cannot be had."""
        if routing.active_hosts or routing.standby_hosts or not routing.directory:
            return routing
        if routing.directory == routing.endpoint:
            return routing  # we are the directory: our own maps are empty, so are the group's
        found = self._cached_for(routing)
        if found is None:
            with self._lock:
                found = self._cached_for(routing) or self._ask(routing)
        if found is None:
            return routing
        return replace(routing, active_hosts=found.active_hosts, standby_hosts=found.standby_hosts)

    def _cached_for(self, routing: Routing) -> Routing | None:
        cached = self._cached
        if (
            cached is not None
            and cached.directory == routing.directory
            and cached.generation >= routing.generation
        ):
            return cached
        return None

    def _ask(self, routing: Routing) -> Routing | None:
        """Step 3, under the lock."""
        directory = routing.directory
        failed = self._failed_at.get(directory)
        if failed is not None and self._monotonic() - failed < self._retry_seconds:
            return None
        try:
            generation, active, standby = decode_routing(self._fetch(directory, self._timeout))
        except (RoutingUnavailable, UserDataError) as exc:
            self._failed_at[directory] = self._monotonic()
            self._log.warning("routing.fetch_failed", directory=directory, error=str(exc))
            return None
        self._failed_at.pop(directory, None)
        if generation < routing.generation:
            return None  # the directory is a generation behind us: ask again next query
        found = Routing(
            active_hosts=active, standby_hosts=standby, generation=generation, directory=directory
        )
        self._cached = found
        return found
