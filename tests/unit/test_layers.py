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
    """The files of a package of worker/, or the one file of a top-level module."""
    if (WORKER / package).is_dir():
        return sorted((WORKER / package).rglob("*.py"))
    return [WORKER / f"{package}.py"]


PACKAGES = ("assignment", "dev", "examples", "http", "kafka", "operators", "processing")
PACKAGES += ("runtime",)
PACKAGES += ("spark", "state", "tasks", "tools", "dsl", "testing")
# The top-level modules every layer may use; they import none of the packages.
FOUNDATION = (
    "clock",
    "closing",
    "config",
    "endpoint",
    "errors",
    "events",
    "laps",
    "lifecycle",
    "observability",
    "partitioner",
    "serde",
    "windowed_serde",
)
# Commands, not layers: only the command line (and the demo, for the Spark loader) uses them.
COMMANDS = ("cli", "dev", "tools", "spark")


def above(*packages: str, commands: tuple[str, ...] = COMMANDS) -> tuple[str, ...]:
    return packages + commands


# package or top-level module -> worker packages it must never import (a layer above it)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    **{name: PACKAGES + ("cli",) for name in FOUNDATION},
    "assignment": above("kafka", "state", "tasks", "runtime", "http", "processing", "examples"),
    "processing": above(
        "kafka", "state", "tasks", "runtime", "http", "assignment", "examples", "dsl", "testing"
    ),
    # the operators the topology builds: beside processing, which they use (never its
    # topology builder, which imports them)
    "operators": above(
        "kafka", "state", "tasks", "runtime", "http", "assignment", "examples", "dsl", "testing"
    ),
    "examples": above("kafka", "state", "tasks", "runtime", "http", "assignment", "testing"),
    # the DSL compiles onto the Processor API's Topology and the operators, nothing else
    "dsl": above("kafka", "state", "tasks", "runtime", "http", "assignment", "examples", "testing"),
    # the test driver runs real tasks over fake Kafka I/O: never the runtime or an adapter
    "testing": above("kafka", "runtime", "http", "examples"),
    "kafka": above("state", "tasks", "runtime", "http", "examples"),
    "state": above("tasks", "runtime", "http", "processing", "examples"),
    "tasks": above("runtime", "http", "examples", "dsl", "testing"),
    # http reads runtime.status (the read model, see EXCEPTIONS) and nothing else of runtime
    "http": above("runtime", "tasks", "kafka", "examples"),
    "runtime": above("examples"),
    # the state tools and the Spark loader work on stores and topics offline, without a runtime
    "tools": above(
        "tasks", "runtime", "http", "processing", "examples", commands=("cli", "dev", "spark")
    ),
    "spark": above(
        "state",
        "tasks",
        "runtime",
        "http",
        "processing",
        "assignment",
        commands=("cli", "dev", "tools"),
    ),
    # the dev commands drive workers as subprocesses: they never reach into one
    "dev": above(
        "state", "tasks", "runtime", "http", "processing", "assignment", commands=("cli", "tools")
    ),
    # the command line parses, loads config and hands over to the runtime
    "cli": ("kafka", "state", "tasks", "http", "assignment", "spark"),
    "__main__": tuple(p for p in PACKAGES if p != "cli"),
}
# package -> the modules of a forbidden package it may import all the same
# cli: the kafka.* settings are checked by librdkafka while the config loads (exit 2)
# processing: the store contracts, the one module of state written for the layers above it
EXCEPTIONS = {
    "http": ("runtime.status",),
    "cli": ("kafka.client_config",),
    "processing": ("state.contracts",),
    "operators": ("state.contracts",),
}


def test_the_layer_map_names_every_package_and_top_level_module_of_worker() -> None:
    on_disk = {p.name for p in WORKER.iterdir() if (p / "__init__.py").is_file()}
    on_disk |= {p.stem for p in WORKER.glob("*.py") if p.stem != "__init__"}
    assert sorted(on_disk - set(FORBIDDEN)) == []
    assert sorted(on_disk - set(FOUNDATION) - {"cli", "__main__"}) == sorted(PACKAGES)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_from_the_layers_above_it(package: str) -> None:
    allowed = EXCEPTIONS.get(package, ())
    upward = [
        f"{path.relative_to(WORKER)} imports {module}"
        for path in modules(package)
        for module in imports(path)
        if module.split(".")[:2] in (["worker", above] for above in FORBIDDEN[package])
        and module.removeprefix("worker.") not in allowed
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
                "state/store_scans.py",
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
