"""Shared fixtures: one embedded broker per test session, started by the tests themselves.

Under ``pytest -n N`` (``make test``) each xdist worker is its own session, so it starts
its own broker on its own port (see tests/support/ports.py) and stops it by PID at the
end; tmp dirs are per worker, and application ids and topic names carry a uuid or live on
a test's own broker, so nothing is shared between workers but the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.ports import PortRegistry, run_directory
from worker.dev.broker import EmbeddedBroker

pytest_plugins = ["tests.support.fixtures", "tests.support.scheduling"]

# Hypothesis fails an example that runs over 200 ms by default: a wall-clock limit that
# no property here is about, and one a loaded machine breaks (two planner properties
# failed under `make test-unit` while another full suite ran, load ~9, most likely so:
# their examples took up to ~100 ms there). Tests that set a deadline of their own keep it.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(scope="session")
def ports(tmp_path_factory: pytest.TempPathFactory) -> PortRegistry:
    return PortRegistry(run_directory(tmp_path_factory) / "ports")


@pytest.fixture(scope="session")
def broker(
    tmp_path_factory: pytest.TempPathFactory, ports: PortRegistry
) -> Iterator[EmbeddedBroker]:
    log = Path(tmp_path_factory.mktemp("broker")) / "broker.log"
    with EmbeddedBroker(port=ports.take(), log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap


@pytest.fixture
def own_broker(tmp_path: Path, ports: PortRegistry) -> Iterator[EmbeddedBroker]:
    """A broker for this test alone: for tests that use fixed topic names (the example app)."""
    with EmbeddedBroker(port=ports.take(), log_path=tmp_path / "own-broker.log") as running:
        yield running
