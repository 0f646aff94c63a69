"""Shared fixtures: one embedded broker per test session, started by the tests themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.dev.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = Path(tmp_path_factory.mktemp("broker")) / "broker.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap
