"""pytest plugin: the order tests run in, and how ``make test`` spreads them over xdist workers.

Registered from tests/conftest.py (``pytest_plugins``).

Order: longest first (``pytest.mark.duration(seconds)``; an unmarked integration or
fault test counts as DEFAULT_BROKER_TEST_SECONDS, any other test as 0), so that a
parallel run ends evenly instead of waiting for one long test that started last. Ties
keep the collection order. A mark is what the test took inside a whole ``make test``
(``--durations``), not alone: under that load a Spark or benchmark test takes three to
five times as long as alone, a unit test hardly longer, and only the order matters.

Spreading (``make test``: ``-n N --dist loadgroup --no-loadscope-reorder``): one test at a
time to whichever xdist worker has room, except that a module in WHOLE_MODULES goes whole
to one worker. xdist's own loadgroup would do that for tests marked ``xdist_group``, but
with pytest 9.2 it silently ignores the mark (pytest-xdist issue #1386: it tags the group
onto the node id, which pytest 9.2 no longer lets a plugin change), so this plugin
supplies the ``loadgroup`` scheduler and names the modules here instead (seen with pytest
9.2.0 and pytest-xdist 3.8.0: a marked module's tests ran on every worker). It does not
read ``xdist_group`` marks: the xdist controller that schedules never sees the items.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# What an integration or fault test without a ``duration`` mark takes, roughly.
DEFAULT_BROKER_TEST_SECONDS = 5.0

WHOLE_MODULES = {
    # Its module-scoped Spark session (a JVM: ~5 s and ~1 GB to start, several times
    # that on a loaded machine) then starts once per run, not once per xdist worker
    # that happens to get one of its tests.
    "tests/integration/test_spark_load.py",
}


def scheduling_unit(nodeid: str) -> str:
    """What one xdist worker runs whole: the module for WHOLE_MODULES, else the test."""
    module = nodeid.split("::", 1)[0]
    return module if module in WHOLE_MODULES else nodeid


def expected_seconds(item: pytest.Item) -> float:
    """How long ``item`` takes: its ``duration`` mark, else a guess from its kind."""
    mark = item.get_closest_marker("duration")
    if mark is not None:
        return float(mark.args[0])
    if item.get_closest_marker("integration") or item.get_closest_marker("faults"):
        return DEFAULT_BROKER_TEST_SECONDS
    return 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest unit first (a WHOLE_MODULES module ranks by its total)."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(scheduling_unit(item.nodeid), []).append(item)
    ranked = sorted(units.values(), key=lambda unit: -sum(map(expected_seconds, unit)))
    items[:] = [item for unit in ranked for item in unit]


class UnitScheduling(LoadScopeScheduling):
    """loadscope's bookkeeping (a unit at a time, at most two queued per worker), with
    scheduling_unit() as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return scheduling_unit(nodeid)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """The ``loadgroup`` scheduler described above; xdist's own for every other mode."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return UnitScheduling(config, log)
