"""Routing maps fetched on demand from the group's directory (user data version 2)."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.unit.http.conftest import ME, OTHER, StatusBox, Stores, key_on, snapshot
from worker.assignment.model import decode_routing, encode_routing
from worker.assignment.task_id import TaskId
from worker.http.directory import RoutingDirectory, RoutingUnavailable
from worker.http.queries import QueryRouter
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.runtime.status import Routing

T = TaskId
ACTIVE = {ME: frozenset({T(0, 0)}), OTHER: frozenset({T(0, 1)})}
STANDBY = {ME: frozenset({T(0, 1)}), OTHER: frozenset({T(0, 0)})}


class FakeDirectory:
    """Answers ``GET /routing`` with the map of ``generation``, or fails."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.error: Exception | None = None
        self.asked: list[str] = []

    def __call__(self, endpoint: str, timeout: float) -> bytes:
        self.asked.append(endpoint)
        if self.error is not None:
            raise self.error
        return encode_routing(self.generation, ACTIVE, STANDBY)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def follower(generation: int = 7) -> Routing:
    return Routing(endpoint=ME, generation=generation, directory=OTHER)


def test_a_snapshot_with_maps_or_without_a_directory_is_used_as_it_is() -> None:
    fake = FakeDirectory(7)
    directory = RoutingDirectory(fake)
    with_maps = Routing(ME, ACTIVE, STANDBY, 7)
    assert directory.resolve(with_maps) is with_maps
    assert directory.resolve(Routing(ME, generation=7)).active_hosts == {}
    assert fake.asked == []


def test_a_followers_maps_come_from_the_directory_once_per_generation() -> None:
    fake = FakeDirectory(7)
    directory = RoutingDirectory(fake)

    resolved = directory.resolve(follower())
    assert (resolved.active_hosts, resolved.standby_hosts) == (ACTIVE, STANDBY)
    assert resolved.endpoint == ME and resolved.generation == 7
    directory.resolve(follower())
    assert fake.asked == [OTHER]

    fake.generation = 8
    assert directory.resolve(follower(8)).active_hosts == ACTIVE
    assert fake.asked == [OTHER, OTHER]


def test_a_directory_a_generation_behind_leaves_the_maps_empty_until_it_caught_up() -> None:
    fake = FakeDirectory(6)
    directory = RoutingDirectory(fake)
    assert directory.resolve(follower()).active_hosts == {}
    fake.generation = 7
    assert directory.resolve(follower()).active_hosts == ACTIVE


def test_an_unreachable_directory_is_asked_again_only_after_the_retry_time() -> None:
    fake, clock = FakeDirectory(7), Clock()
    fake.error = RoutingUnavailable("refused")
    directory = RoutingDirectory(fake, retry_seconds=1.0, monotonic=clock)
    assert directory.resolve(follower()).active_hosts == {}
    assert directory.resolve(follower()).active_hosts == {}
    assert len(fake.asked) == 1
    fake.error = None
    clock.now += 1.5
    assert directory.resolve(follower()).active_hosts == ACTIVE


@pytest.fixture
def directory_server(
    topology: BuiltTopology, stores: Stores
) -> Iterator[tuple[HttpServer, StatusBox]]:
    box = StatusBox()
    running = HttpServer("127.0.0.1", 0, Metrics(), box, QueryRouter(topology, box))
    running.start()
    yield running, box
    running.stop()


def test_a_follower_redirects_with_the_map_its_directory_serves(
    topology: BuiltTopology, stores: Stores, directory_server: tuple[HttpServer, StatusBox]
) -> None:
    server, box = directory_server
    there = f"127.0.0.1:{server.port}"
    box.current = snapshot(stores, {}, {there: ["0_1"], ME: ["0_0"]}, {ME: ["0_1"]})
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("GET", "/routing")
    response = connection.getresponse()
    assert response.getheader("Content-Type") == "application/octet-stream"
    assert decode_routing(response.read())[0] == 7
    connection.close()

    mine = snapshot(stores, {"0_0": ("active", "running")})
    mine = replace(mine, routing=replace(mine.routing, directory=there))
    router = QueryRouter(topology, StatusBox(mine))
    reply = router.get("counts", key_on(1), False, f"/stores/counts/keys/{key_on(1)}")
    assert reply.status == 307
    assert reply.headers["X-Worker-Endpoint"] == there
    assert router.tasks().body["active_hosts"] == {there: ["0_1"], ME: ["0_0"]}


def test_an_instance_without_a_map_answers_routing_with_404(
    directory_server: tuple[HttpServer, StatusBox],
) -> None:
    server, _box = directory_server
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("GET", "/routing")
    assert connection.getresponse().status == 404
    connection.close()
