"""Every example of docs/windows.md §2 runs as written: each code block is executed, its
topology built and fed records through the task graph, and its outputs checked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.aggregating import Running
from worker.windowed_serde import Windowed

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "windows.md"


def example(kind: str) -> Any:
    """The topology ``t`` of the guide's example under the heading ``### <kind>:``."""
    found = re.search(rf"### {kind}:[^\n]*\n\n```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert found, f"no {kind} example in {GUIDE}"
    scope: dict[str, Any] = {}
    exec(compile(found.group(1), f"windows.md ({kind})", "exec"), scope)  # noqa: S102
    return scope["t"].build()


CASES = {
    "Tumbling": (
        [("acct-1", {"amount": 10}, 1_000), ("acct-1", {"amount": 5}, 2_000)],
        [
            (Windowed("acct-1", 0, 60_000), {"count": 1, "sum": 10}),
            (Windowed("acct-1", 0, 60_000), {"count": 2, "sum": 15}),
        ],
    ),
    "Hopping": (
        [("acct-1", {"amount": 1}, n * 1_000) for n in range(21)]
        + [("acct-2", {"amount": 1}, 2_000_000)],
        [
            (
                Windowed("acct-1", 0, 600_000),
                {"account": "acct-1", "from": 0, "to": 600_000, "payments": 21},
            )
        ],
    ),
    "Sliding": (
        [("acct-1", {"amount": 10}, 400_000), ("acct-1", {"amount": 5}, 500_000)],
        [
            (Windowed("acct-1", 100_000, 400_000), 10),
            (Windowed("acct-1", 200_000, 500_000), 15),
            (Windowed("acct-1", 400_001, 700_001), 5),
        ],
    ),
    "Session": (
        [("u1", {}, 0), ("u1", {}, 1_000_000), ("u2", {}, 5_000_000)],
        [(Windowed("u1", 0, 1_000_000), {"clicks": 2})],
    ),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_guide_example_runs_as_written(kind: str, tmp_path: Path) -> None:
    records, expected = CASES[kind]
    task = Running(example(kind), tmp_path)
    try:
        task.feed_all(records)
        assert [(o.key, o.value) for o in task.outputs()] == expected
    finally:
        task.close()
