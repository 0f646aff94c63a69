"""The topology builder: validation of names, parents and stores; the split into sub-topologies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from worker.errors import TopologyError
from worker.processing import ProcessorContext, Topology
from worker.processing.built_topology import BuiltTopology, Subtopology
from worker.serde import JSON, STR


def noop(ctx: ProcessorContext, key: Any, value: Any) -> None:
    pass


def names(st: Subtopology) -> list[str]:
    """Every node of a sub-topology, sources first, then processors, then sinks."""
    return [
        *(n.name for n in st.sources),
        *(n.name for n in st.processors),
        *(n.name for n in st.sinks),
    ]


def store_names(st: Subtopology) -> list[str]:
    return [s.name for s in st.stores]


def two_chains(first: str, second: str) -> BuiltTopology:
    """Two unconnected source -> processor -> sink chains, ``first`` added first."""
    topology = Topology()
    for name in (first, second):
        topology.add_source(name, f"{name}-topic")
    for name in (first, second):
        topology.add_processor(f"{name}-proc", noop, parents=[name])
        topology.add_sink(f"{name}-sink", f"{name}-out", parents=[f"{name}-proc"])
    return topology.build()


# -- sub-topologies ------------------------------------------------------------------


def test_a_single_chain_is_one_subtopology_with_its_children() -> None:
    built = (
        Topology()
        .add_source("in", "input")
        .add_processor("p", noop, parents=["in"])
        .add_sink("out", "output", parents=["p"])
        .build()
    )

    (st,) = built.subtopologies
    assert st.id == 0
    assert names(st) == ["in", "p", "out"]
    assert st.children == {"in": ("p",), "p": ("out",)}
    assert st.source_topics == ("input",)
    assert built.sink_topics() == {"output"}


def test_nodes_not_connected_by_an_edge_or_a_store_are_separate_subtopologies() -> None:
    built = two_chains("a", "b")

    assert [names(st) for st in built.subtopologies] == [
        ["a", "a-proc", "a-sink"],
        ["b", "b-proc", "b-sink"],
    ]
    assert built.source_topics_by_subtopology() == {0: ("a-topic",), 1: ("b-topic",)}
    assert built.sink_topics() == {"a-out", "b-out"}


def test_subtopologies_are_numbered_in_the_order_their_first_node_was_added() -> None:
    built = two_chains("z", "a")

    assert [(st.id, st.source_topics) for st in built.subtopologies] == [
        (0, ("z-topic",)),
        (1, ("a-topic",)),
    ]


def test_numbering_follows_the_first_node_even_when_later_nodes_come_in_another_order() -> None:
    built = (
        Topology()
        .add_source("first", "t1")
        .add_source("second", "t2")
        .add_processor("second-proc", noop, parents=["second"])
        .add_processor("first-proc", noop, parents=["first"])
        .build()
    )

    assert [names(st) for st in built.subtopologies] == [
        ["first", "first-proc"],
        ["second", "second-proc"],
    ]


def test_a_processor_with_two_parents_joins_their_subtopologies() -> None:
    built = (
        Topology()
        .add_source("a", "ta")
        .add_source("b", "tb")
        .add_processor("join", noop, parents=["a", "b"])
        .build()
    )

    (st,) = built.subtopologies
    assert st.source_topics == ("ta", "tb")
    assert st.children == {"a": ("join",), "b": ("join",)}


def test_a_store_shared_by_two_processors_joins_their_subtopologies() -> None:
    built = (
        Topology()
        .add_source("a", "ta")
        .add_source("b", "tb")
        .add_source("c", "tc")
        .add_store("shared")
        .add_processor("pa", noop, parents=["a"], stores=["shared"])
        .add_processor("pb", noop, parents=["b"], stores=["shared"])
        .add_processor("pc", noop, parents=["c"])
        .build()
    )

    assert [names(st) for st in built.subtopologies] == [["a", "b", "pa", "pb"], ["c", "pc"]]
    assert [store_names(st) for st in built.subtopologies] == [["shared"], []]


def test_a_table_read_by_a_processor_joins_the_processors_subtopology() -> None:
    built = (
        Topology()
        .add_source("events", "events")
        .add_table("profiles", "profiles")
        .add_processor("p", noop, parents=["events"], stores=["profiles"])
        .build()
    )

    (st,) = built.subtopologies
    assert st.source_topics == ("events", "profiles")
    assert store_names(st) == ["profiles"]


def test_a_table_is_a_source_plus_a_read_only_store_whose_changelog_is_its_topic() -> None:
    built = (
        Topology().add_table("profiles", "profile-topic", key_serde=STR, value_serde=JSON).build()
    )

    (st,) = built.subtopologies
    (source,) = st.sources
    (spec,) = st.stores
    assert (source.name, source.topic, source.table_store) == (
        "profiles",
        "profile-topic",
        "profiles",
    )
    assert (source.key_serde, source.value_serde) == (STR, JSON)
    assert spec.is_table
    assert (spec.key_serde, spec.value_serde) == (STR, JSON)
    assert spec.changelog("my-app") == "profile-topic"
    assert st.changelog_topics("my-app") == {"profiles": "profile-topic"}


def test_a_store_changelog_is_named_after_the_application_and_the_store() -> None:
    built = (
        Topology()
        .add_source("in", "input")
        .add_store("click-counts")
        .add_processor("p", noop, parents=["in"], stores=["click-counts"])
        .build()
    )

    st, spec = built.store("click-counts")
    assert st.id == 0
    assert not spec.is_table
    assert spec.changelog("clicks-app") == "clicks-app-click-counts-changelog"
    assert st.changelog_topics("clicks-app") == {
        "click-counts": "clicks-app-click-counts-changelog"
    }


def test_looking_up_an_unknown_store_raises_key_error() -> None:
    built = Topology().add_source("in", "input").build()

    with pytest.raises(KeyError):
        built.store("nope")


def test_a_parent_lists_every_child_in_the_subtopology() -> None:
    built = (
        Topology()
        .add_source("in", "input")
        .add_processor("p1", noop, parents=["in"])
        .add_processor("p2", noop, parents=["in"])
        .add_sink("s", "output", parents=["in", "p1"])
        .build()
    )

    (st,) = built.subtopologies
    assert st.children == {"in": ("p1", "p2", "s"), "p1": ("s",)}


# -- validation ----------------------------------------------------------------------

Step = Callable[[Topology], Topology]
# Add a node or store called ``name`` (reading ``topic`` where it reads one).
ADD: dict[str, Callable[[Topology, str, str], Topology]] = {
    "source": lambda t, name, topic: t.add_source(name, topic),
    "table": lambda t, name, topic: t.add_table(name, topic),
    "store": lambda t, name, topic: t.add_store(name),
    "processor": lambda t, name, topic: t.add_processor(name, noop, parents=["in"]),
    "sink": lambda t, name, topic: t.add_sink(name, topic, parents=["in"]),
}


@pytest.mark.parametrize("second", sorted(ADD))
@pytest.mark.parametrize("first", sorted(ADD))
def test_a_name_can_be_used_once_across_every_node_and_store(first: str, second: str) -> None:
    topology = ADD[first](Topology().add_source("in", "input"), "x", "topic-1")

    with pytest.raises(TopologyError, match="name 'x'"):
        ADD[second](topology, "x", "topic-2")


@pytest.mark.parametrize("kind", sorted(ADD))
def test_an_empty_name_is_refused(kind: str) -> None:
    with pytest.raises(TopologyError, match="''"):
        ADD[kind](Topology().add_source("in", "input"), "", "topic-1")


@pytest.mark.parametrize(
    "step",
    [
        lambda t: t.add_source("other", "input"),
        lambda t: t.add_table("other", "input"),
    ],
    ids=["source", "table"],
)
def test_a_topic_can_be_read_by_one_source_or_table_only(step: Step) -> None:
    with pytest.raises(TopologyError, match="'input' is already a source"):
        step(Topology().add_source("in", "input"))


def test_a_source_cannot_read_the_topic_of_a_table() -> None:
    with pytest.raises(TopologyError, match="already a source"):
        Topology().add_table("profiles", "profiles").add_source("in", "profiles")


@pytest.mark.parametrize(
    "step",
    [
        lambda t: t.add_processor("p", noop, parents=["missing"]),
        lambda t: t.add_sink("s", "output", parents=["missing"]),
        lambda t: t.add_processor("p", noop, parents=["in", "missing"]),
    ],
    ids=["processor", "sink", "one-of-two"],
)
def test_an_unknown_parent_is_refused(step: Step) -> None:
    with pytest.raises(TopologyError, match="unknown parent 'missing'"):
        step(Topology().add_source("in", "input"))


def test_a_sink_cannot_be_a_parent() -> None:
    topology = Topology().add_source("in", "input").add_sink("s", "output", parents=["in"])

    with pytest.raises(TopologyError, match="unknown parent 's'"):
        topology.add_processor("p", noop, parents=["s"])


def test_a_store_cannot_be_a_parent() -> None:
    topology = Topology().add_source("in", "input").add_store("st")

    with pytest.raises(TopologyError, match="unknown parent 'st'"):
        topology.add_processor("p", noop, parents=["st"], stores=["st"])


@pytest.mark.parametrize(
    "step",
    [
        lambda t: t.add_processor("p", noop, parents=[]),
        lambda t: t.add_sink("s", "output", parents=[]),
    ],
    ids=["processor", "sink"],
)
def test_processors_and_sinks_need_a_parent(step: Step) -> None:
    with pytest.raises(TopologyError, match="needs at least one parent"):
        step(Topology().add_source("in", "input"))


def test_a_processor_cannot_use_an_unknown_store() -> None:
    with pytest.raises(TopologyError, match="unknown store 'missing'"):
        Topology().add_source("in", "input").add_processor(
            "p", noop, parents=["in"], stores=["missing"]
        )


def test_a_processor_must_be_callable() -> None:
    with pytest.raises(TopologyError, match="not callable"):
        Topology().add_source("in", "input").add_processor("p", "noop", parents=["in"])  # type: ignore[arg-type]


def test_a_processor_init_must_be_callable_and_is_kept_with_the_processor() -> None:
    with pytest.raises(TopologyError, match="processor 'p': init is not callable"):
        Topology().add_source("in", "input").add_processor("p", noop, ["in"], init="x")  # type: ignore[arg-type]

    def init(ctx: object) -> None:
        pass

    built = Topology().add_source("in", "input").add_processor("p", noop, ["in"], init=init)
    assert built.build().subtopologies[0].processors[0].init is init


def test_a_refused_node_leaves_its_name_free() -> None:
    topology = Topology().add_source("in", "input")
    with pytest.raises(TopologyError):
        topology.add_processor("p", noop, parents=["missing"])

    topology.add_processor("p", noop, parents=["in"])

    assert names(topology.build().subtopologies[0]) == ["in", "p"]


def test_a_topology_without_sources_cannot_be_built() -> None:
    with pytest.raises(TopologyError, match="at least one source"):
        Topology().build()


def test_a_topology_with_only_a_store_cannot_be_built() -> None:
    with pytest.raises(TopologyError, match="at least one source"):
        Topology().add_store("lonely").build()


def test_a_store_no_processor_uses_is_refused_at_build() -> None:
    topology = (
        Topology()
        .add_source("in", "input")
        .add_store("used")
        .add_store("forgotten")
        .add_store("also-forgotten")
        .add_processor("p", noop, parents=["in"], stores=["used"])
    )

    with pytest.raises(TopologyError, match=r"\['also-forgotten', 'forgotten'\].*no processor"):
        topology.build()


def test_a_table_no_processor_reads_is_still_built_since_its_topic_fills_it() -> None:
    built = Topology().add_source("in", "input").add_table("t", "table-topic").build()

    assert [store_names(st) for st in built.subtopologies] == [[], ["t"]]
