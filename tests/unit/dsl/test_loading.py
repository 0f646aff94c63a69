"""``worker start --app`` takes a StreamsBuilder and builds it with the worker's id."""

from __future__ import annotations

import sys
import types

import pytest

from worker.cli import load_topology
from worker.dsl import StreamsBuilder
from worker.errors import ConfigError


@pytest.fixture
def app_module() -> types.ModuleType:
    module = types.ModuleType("dsl_app_under_test")
    builder = StreamsBuilder()
    builder.stream("in").group_by(lambda k, v: v, name="g").count(name="c")
    module.builder = builder  # type: ignore[attr-defined]
    module.build = lambda: builder  # type: ignore[attr-defined]
    module.built = builder.build("other")  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


@pytest.mark.parametrize("attr", ["builder", "build"])
def test_a_builder_is_built_with_the_workers_application_id(
    app_module: types.ModuleType, attr: str
) -> None:
    built = load_topology(f"dsl_app_under_test:{attr}", "payments")
    assert [st.source_topics for st in built.subtopologies][1] == ("payments-g-repartition",)


def test_a_topology_built_for_another_application_id_is_a_config_error(
    app_module: types.ModuleType,
) -> None:
    with pytest.raises(ConfigError, match="'other'"):
        load_topology("dsl_app_under_test:built", "payments")
