"""The container health check finds the port from the settings, not from the image."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.unit.http.conftest import StatusBox
from worker.clock import FakeClock
from worker.config import load
from worker.http.probe import main, target
from worker.http.server import HttpServer
from worker.observability import Metrics
from worker.runtime.status import Status, WorkerState


@pytest.fixture
def server(box: StatusBox) -> Iterator[HttpServer]:
    running = HttpServer("127.0.0.1", 0, Metrics(), box, management_port=0)
    running.start()
    yield running
    running.stop()


def config(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "worker.toml"
    path.write_text(text)
    return ["--config", str(path)]


def alive(box: StatusBox, state: WorkerState = WorkerState.RUNNING) -> None:
    clock = FakeClock()
    box.current = Status(state, heartbeat=clock.monotonic()).judged(clock.monotonic())


def test_a_live_worker_is_healthy_on_the_port_its_settings_name(
    server: HttpServer, box: StatusBox, tmp_path: Path
) -> None:
    alive(box)

    assert main(config(tmp_path, f"http.port = {server.port}\n")) == 0
    assert main(config(tmp_path, f"http.management.port = {server.management_port}\n")) == 0


def test_a_worker_in_error_or_not_listening_is_unhealthy(
    server: HttpServer, box: StatusBox, tmp_path: Path
) -> None:
    alive(box, WorkerState.ERROR)

    assert main(config(tmp_path, f"http.port = {server.port}\n")) == 1
    assert main(config(tmp_path, f"http.port = {free_port()}\n")) == 1
    assert main(config(tmp_path, "http.port = 'not a port'\n")) == 1


def test_a_wildcard_address_is_probed_on_loopback() -> None:
    settings = load(overrides={"http.host": "0.0.0.0", "http.port": "81"}, environ={}).settings
    v6 = load(overrides={"http.host": "::", "http.management.port": "82"}, environ={}).settings

    assert target(settings) == ("127.0.0.1", 81)
    assert target(v6) == ("::1", 82)
