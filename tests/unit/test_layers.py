"""The package layout is a map of the architecture: layers import downwards only, and
each third-party client is imported by its one adapter package."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[2] / "worker"


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at any depth (TYPE_CHECKING blocks included)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def modules(package: str) -> list[Path]:
    return sorted((WORKER / package).rglob("*.py"))


# package -> worker packages it must never import (a layer above it)
FORBIDDEN = {
    "assignment": ("kafka", "state", "tasks", "runtime", "http", "processing"),
    "processing": ("kafka", "state", "tasks", "runtime", "http"),
    "state": ("tasks", "runtime", "http"),
    "kafka": ("state", "tasks", "runtime", "http"),
    "tasks": ("runtime", "http"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_from_the_layers_above_it(package: str) -> None:
    upward = [
        f"{path.relative_to(WORKER)} imports {module}"
        for path in modules(package)
        for module in imports(path)
        if module.split(".")[:2] in (["worker", above] for above in FORBIDDEN[package])
    ]
    assert upward == []


def test_the_processing_modules_do_not_import_each_other_in_a_cycle() -> None:
    graph = {
        path.stem: {
            m.split(".")[2]
            for m in imports(path)
            if m.startswith("worker.processing.") and m.count(".") == 2
        }
        for path in modules("processing")
    }

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        return any(
            nxt == target or (nxt not in seen and reaches(nxt, target, seen | {nxt}))
            for nxt in graph.get(start, ())
        )

    assert [name for name in graph if reaches(name, name, {name})] == []


@pytest.mark.parametrize(
    ("library", "allowed"),
    [
        ("confluent_kafka", ("kafka/",)),
        ("kafka", ("kafka/",)),
        (
            "rocksdict",
            (
                "state/store.py",
                "state/store_format.py",
                "state/memtables.py",
                "state/rocksdb_env.py",
                "state/rocksdb_errors.py",
            ),
        ),
        ("pyspark", ("spark/",)),
    ],
)
def test_each_third_party_client_is_imported_by_its_adapter_alone(
    library: str, allowed: tuple[str, ...]
) -> None:
    importers = [
        str(path.relative_to(WORKER))
        for path in sorted(WORKER.rglob("*.py"))
        if any(m == library or m.startswith(library + ".") for m in imports(path))
    ]
    assert importers, f"nothing imports {library}: the check would be vacuous"
    assert [p for p in importers if not p.startswith(allowed)] == []
