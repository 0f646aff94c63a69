"""Every example of docs/joins.md runs as written: each code block is executed with
``pair``, its topology built and fed records through the task graph on real stores, and
its outputs checked against what the guide says they are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.joining import Joining

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "joins.md"


def example(heading: str) -> Any:
    """The topology ``t`` of the guide's example under ``### <heading>``."""
    found = re.search(rf"### {heading}\n.*?```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert found, f"no example {heading!r} in {GUIDE}"
    scope: dict[str, Any] = {"pair": lambda a, b: [a, b]}
    exec(compile(found.group(1), f"joins.md ({heading})", "exec"), scope)  # noqa: S102
    return scope["t"].build()


PROFILE = {"name": "Ada"}
PAYMENT = {"amount": 5}

# heading -> (input records: topic, key, value, timestamp), output topic, expected outputs
CASES: dict[str, tuple[list[tuple[str, str, Any, int]], str, list[Any]]] = {
    "Stream-table: latest value": (
        [("account-profiles", "a", PROFILE, 5_000), ("payments", "a", PAYMENT, 1_000)],
        "enriched",
        [("a", [PAYMENT, PROFILE], 1_000)],
    ),
    "Stream-table: as of the record's time": (
        [
            ("account-profiles", "a", PROFILE, 5_000),
            ("payments", "a", PAYMENT, 1_000),
            ("payments", "a", PAYMENT, 6_000),
        ],
        "enriched",
        [("a", [PAYMENT, None], 1_000), ("a", [PAYMENT, PROFILE], 6_000)],
    ),
    "Stream-table: with a grace": (
        [
            ("payments", "a", PAYMENT, 1_000),
            ("account-profiles", "a", PROFILE, 500),
            ("payments", "a", PAYMENT, 11_000),
        ],
        "enriched",
        [("a", [PAYMENT, PROFILE], 1_000)],
    ),
    "Stream-stream: left join": (
        [
            ("orders", "o1", "order-1", 0),
            ("orders", "o2", "order-2", 0),
            ("shipments", "o1", "ship-1", 30_000),
            ("orders", "o3", "order-3", 70_000),
            ("orders", "o4", "order-4", 70_001),
        ],
        "order-status",
        [("o1", ["order-1", "ship-1"], 30_000), ("o2", ["order-2", None], 0)],
    ),
    "Table-table: outer join": (
        [
            ("account-limits", "a", 100, 1),
            ("account-profiles", "a", PROFILE, 2),
            ("account-limits", "a", None, 3),
        ],
        "accounts",
        [("a", [100, None], 1), ("a", [100, PROFILE], 2), ("a", [None, PROFILE], 3)],
    ),
}


@pytest.mark.parametrize("heading", sorted(CASES))
def test_the_guide_example_gives_what_the_guide_says(tmp_path: Path, heading: str) -> None:
    records, topic, expected = CASES[heading]
    join = Joining(example(heading), tmp_path)
    try:
        for source, key, value, ts in records:
            join.feed(source, key, value, ts)
        assert join.outputs(topic) == expected
    finally:
        join.close()


def test_the_global_table_example_builds_with_no_task_store() -> None:
    built = example("Stream-table: global table")
    assert [g.name for g in built.global_tables] == ["merchants"]
    assert [st.stores for st in built.subtopologies] == [()]


def test_the_dsl_example_runs_in_the_test_driver_over_two_partitions() -> None:
    from worker.testing import TopologyTestDriver

    found = re.search(r"### DSL: [^\n]*\n.*?```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert found
    scope: dict[str, Any] = {"pair": lambda a, b: [a, b]}
    exec(compile(found.group(1), "joins.md (DSL)", "exec"), scope)  # noqa: S102
    with TopologyTestDriver(scope["b"], {"application.id": "app"}, partitions=2) as d:
        assert [r.topic for r in scope["b"].build("app").repartition_topics] == [
            "app-enrich-repartition"
        ]
        d.input_topic("account-profiles").pipe("acct-1", PROFILE, timestamp=5_000)
        d.input_topic("payments").pipe("p1", {"account": "acct-1"}, timestamp=6_000)
        assert d.output_topic("enriched").read_key_values() == [
            ("acct-1", [{"account": "acct-1"}, PROFILE])
        ]


def test_the_foreign_key_example_gives_what_the_guide_says_over_two_partitions() -> None:
    from worker.testing import TopologyTestDriver

    found = re.search(r"### DSL: foreign-key join\n.*?```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert found
    scope: dict[str, Any] = {"pair": lambda a, b: [a, b]}
    exec(compile(found.group(1), "joins.md (DSL, foreign key)", "exec"), scope)  # noqa: S102
    order, moved, ada, bob = {"customer": "c1"}, {"customer": "c2"}, {"n": "Ada"}, {"n": "Bob"}
    with TopologyTestDriver(scope["b"], {"application.id": "app"}, partitions=2) as d:
        orders, customers = d.input_topic("orders"), d.input_topic("customers")
        out = d.output_topic("orders-enriched")
        orders.pipe("o1", order, timestamp=1)
        customers.pipe("c1", ada, timestamp=2)
        assert out.read_key_values() == [("o1", [order, None]), ("o1", [order, ada])]
        customers.pipe("c2", bob, timestamp=3)
        orders.pipe("o1", moved, timestamp=4)
        customers.pipe("c1", {"n": "Ada 2"}, timestamp=5)
        assert out.read_key_values() == [("o1", [moved, bob])]
        assert d.store("with-customer-store").get("o1") == [moved, bob]
        orders.pipe("o1", None, timestamp=6)
        assert out.read_key_values() == [("o1", None)]
