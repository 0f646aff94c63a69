"""pytest plugin: which broker a test runs on, the embedded one (Tansu) or Apache Kafka.

Registered from tests/conftest.py (``pytest_plugins``). A test, class or module says
where it runs with a mark; unmarked tests run on the default broker (Tansu, or the one
``WORKER_TEST_BROKER`` names):

    pytestmark = pytest.mark.brokers("kafka")            # on Kafka only
    @pytest.mark.brokers("tansu", "kafka")               # on both: test_x[tansu], test_x[kafka]

A marked test is parametrized over a module-scoped ``broker_kind`` fixture (its ids name
the broker), and ``broker``, ``bootstrap``, ``own_broker``, ``worker_factory`` and the
tests/support helpers that take a bootstrap follow it. Each xdist worker starts at most
one session broker of each kind, lazily: Kafka's JVM only when a test there needs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.support.ports import PortRegistry
from worker.dev.broker import EmbeddedBroker
from worker.dev.kafka_broker import KafkaBroker

TANSU = "tansu"
KAFKA = "kafka"
KINDS = (TANSU, KAFKA)
DEFAULT_ENV = "WORKER_TEST_BROKER"


class Broker(Protocol):
    """What tests use of either broker."""

    @property
    def bootstrap(self) -> str: ...

    def stop(self, timeout: float = ...) -> None: ...


def default_kind() -> str:
    kind = os.environ.get(DEFAULT_ENV, TANSU)
    if kind not in KINDS:
        raise pytest.UsageError(f"{DEFAULT_ENV}={kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "brokers(*kinds): run on these brokers ('tansu', 'kafka'), each a parametrized case "
        "(tests/support/brokers.py)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize marked tests over their brokers (module scope: one broker per module)."""
    mark = metafunc.definition.get_closest_marker("brokers")
    if mark is None:
        return
    kinds = list(mark.args)
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds or unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: brokers{tuple(kinds)}")
    if "broker_kind" not in metafunc.fixturenames:
        metafunc.fixturenames.append("broker_kind")
    metafunc.parametrize("broker_kind", kinds, indirect=True, ids=kinds, scope="module")


@pytest.fixture(scope="module")
def broker_kind(request: pytest.FixtureRequest) -> str:
    """The broker this test runs on: its ``brokers`` parameter, else the default."""
    return str(getattr(request, "param", None) or default_kind())


@pytest.fixture(scope="session")
def tansu_broker(
    tmp_path_factory: pytest.TempPathFactory, ports: PortRegistry
) -> Iterator[EmbeddedBroker]:
    log = Path(tmp_path_factory.mktemp("broker")) / "broker.log"
    with EmbeddedBroker(port=ports.take(), log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def kafka_broker(
    tmp_path_factory: pytest.TempPathFactory, ports: PortRegistry
) -> Iterator[KafkaBroker]:
    home = Path(tmp_path_factory.mktemp("kafka"))
    with KafkaBroker(
        port=ports.take(), take_port=ports.take, data_dir=home, log_path=home / "broker.log"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, broker_kind: str) -> Broker:
    """The session broker of this test's kind."""
    found: Broker = request.getfixturevalue(f"{broker_kind}_broker")
    return found


@pytest.fixture(scope="module")
def bootstrap(broker: Broker) -> str:
    return broker.bootstrap


def start_own_broker(kind: str, home: Path, ports: PortRegistry) -> Broker:
    """A started broker of ``kind`` for one test (the caller stops it)."""
    home.mkdir(parents=True, exist_ok=True)
    if kind == KAFKA:
        kafka = KafkaBroker(
            port=ports.take(), take_port=ports.take, data_dir=home, log_path=home / "broker.log"
        )
        kafka.start()
        return kafka
    return EmbeddedBroker(port=ports.take(), log_path=home / "own-broker.log").__enter__()


@pytest.fixture
def own_broker(tmp_path: Path, ports: PortRegistry, broker_kind: str) -> Iterator[Broker]:
    """A broker for this test alone: for tests that use fixed topic names (the example
    app) or change the broker itself; of the test's kind."""
    running = start_own_broker(broker_kind, tmp_path / "own-broker", ports)
    try:
        yield running
    finally:
        running.stop()
