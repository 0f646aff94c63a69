"""The event names the benchmarks and tests parse are the ones the worker logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker import events

WORKER = Path(events.__file__).resolve().parent
NAMES = sorted(n for n in vars(events) if n.isupper() and isinstance(getattr(events, n), str))
TRANSITIONS = {n for n in NAMES if n.endswith("_TRANSITION")}


@pytest.mark.parametrize("name", sorted(set(NAMES) - TRANSITIONS))
def test_each_declared_event_is_logged_by_the_worker(name: str) -> None:
    emitters = [
        str(path.relative_to(WORKER))
        for path in sorted(WORKER.rglob("*.py"))
        if path.name != "events.py" and name in path.read_text() and "dev" not in path.parts
    ]
    assert emitters, f"no module of worker/ logs events.{name}: remove it or log it"
