"""Global tables in the topology: read by processors of any sub-topology, joining none,
and opened by no task (every worker holds them whole: worker/runtime/global_tables.py)."""

from __future__ import annotations

from typing import Any

import pytest

from worker.errors import TopologyError
from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology
from worker.serde import STR


def noop(ctx: ProcessorContext, key: Any, value: Any) -> None:
    return None


def test_two_streams_reading_one_global_table_stay_two_subtopologies() -> None:
    t = Topology().add_global_table("g", "g-topic", STR, STR)
    t.add_source("a", "a-topic").add_source("b", "b-topic")
    t.add_processor("pa", noop, ["a"], ["g"]).add_processor("pb", noop, ["b"], ["g"])
    built = t.build()
    assert [st.source_topics for st in built.subtopologies] == [("a-topic",), ("b-topic",)]
    assert all(st.stores == () for st in built.subtopologies)
    assert [[g.name for g in st.global_stores] for st in built.subtopologies] == [["g"], ["g"]]
    assert [g.source_topic for g in built.global_tables] == ["g-topic"]


def test_a_global_table_topic_cannot_also_be_a_source_nor_its_name_reused() -> None:
    t = Topology().add_global_table("g", "g-topic")
    with pytest.raises(TopologyError, match="already a source"):
        t.add_source("s", "g-topic")
    with pytest.raises(TopologyError, match="already used"):
        t.add_source("g", "other")
