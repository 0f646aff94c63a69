"""Shared fixtures: the brokers (tests/support/brokers.py), started by the tests themselves.

Under ``pytest -n N`` (``make test``) each xdist worker is its own session, so it starts
its own broker on its own port (see tests/support/ports.py) and stops it by PID at the
end; tmp dirs are per worker, and application ids and topic names carry a uuid or live on
a test's own broker, so nothing is shared between workers but the machine.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from tests.support.ports import PortRegistry, run_directory

pytest_plugins = [
    "tests.support.brokers",
    "tests.support.fixtures",
    "tests.support.scheduling",
    "tests.support.jvm_options",
]

# Six test processes share two cores under `make test`: how fast hypothesis generates
# inputs then says nothing about the code under test (a planner test once generated 8
# inputs in its first second and failed the too_slow health check). Deadlines off for
# the same reason; the properties themselves are unchanged.
settings.register_profile(
    "shared_machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared_machine")


@pytest.fixture(scope="session")
def ports(tmp_path_factory: pytest.TempPathFactory) -> PortRegistry:
    return PortRegistry(run_directory(tmp_path_factory) / "ports")
