"""Shared fixtures: one embedded broker per test session, started by the tests themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.dev.broker import EmbeddedBroker

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = Path(tmp_path_factory.mktemp("broker")) / "broker.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker for this test alone: for tests that use fixed topic names (the example app)."""
    with EmbeddedBroker(log_path=tmp_path / "own-broker.log") as running:
        yield running
