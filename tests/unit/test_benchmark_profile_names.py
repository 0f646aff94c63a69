"""The profile categories name real code: a renamed or moved function fails here, by name.

The profiled benchmarks sort py-spy samples by the qualified names of functions
(``TaskCommitter.commit``) and by file paths, written as strings in benchmarks/. A rename
under worker/ does not break those strings; it silently moves the samples into "everything
else". This test resolves every name against the source tree.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import profiling

REPO = Path(__file__).resolve().parents[2]
PROFILED = ("throughput", "count_sum", "restore")
PROFILE_CALLS = ("summarise", "breakdown")  # profiling functions whose 2nd argument is a name


def qualified_names(path: Path) -> Iterator[str]:
    """``function`` and ``Class.method`` for every function and method a module defines."""

    def walk(nodes: list[ast.stmt], prefix: str) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + node.name
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")

    yield from walk(ast.parse(path.read_text()).body, "")


@functools.cache
def defined() -> dict[str, list[str]]:
    """qualified name -> the files (relative to the repository) that define it."""
    where: dict[str, list[str]] = {}
    for package in ("worker", "benchmarks"):
        for path in sorted((REPO / package).rglob("*.py")):
            for name in qualified_names(path):
                where.setdefault(name, []).append(str(path.relative_to(REPO)))
    return where


def categories() -> list[tuple[str, profiling.Category]]:
    """(module.attribute, category) for every category list a profiled benchmark declares."""
    found = []
    for name in PROFILED:
        module = importlib.import_module(f"benchmarks.{name}")
        for attr, value in vars(module).items():
            if isinstance(value, list) and value and isinstance(value[0], profiling.Category):
                found += [(f"{name}.{attr}", category) for category in value]
    return found


def profiled_frames() -> list[tuple[str, str]]:
    """(benchmark, name) for every literal frame a benchmark profiles under."""
    frames = []
    for name in PROFILED:
        tree = ast.parse((REPO / "benchmarks" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in PROFILE_CALLS
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                frames.append((name, str(node.args[1].value)))
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "within" for t in node.targets)
            ):
                frames.append((name, str(node.value.value)))
    return frames


CATEGORIES = categories()
NAMES = sorted(
    {
        (where, function)
        for where, category in CATEGORIES
        for function in (*category.under, *category.leaf_functions)
    }
    | set(profiled_frames())
)


def test_the_profiled_benchmarks_declare_categories_and_frames() -> None:
    assert len(CATEGORIES) >= 10, "the check would be vacuous"
    assert {frame for _, frame in profiled_frames()} >= {"Worker._run_loop"}


@pytest.mark.parametrize(("where", "function"), NAMES, ids=[f"{w}:{f}" for w, f in NAMES])
def test_each_function_a_profile_category_names_exists(where: str, function: str) -> None:
    assert function in defined(), (
        f"{where} names {function!r}, which no module of worker/ or benchmarks/ defines "
        "(renamed or moved?): update the name in benchmarks/"
    )


FILES = sorted({(where, file) for where, category in CATEGORIES for file in category.leaf_files})


@pytest.mark.parametrize(("where", "file"), FILES, ids=[f"{w}:{f}" for w, f in FILES])
def test_each_file_a_profile_category_names_exists(where: str, file: str) -> None:
    assert (REPO / file).is_file(), f"{where} names {file!r}, which does not exist"


WORDS = sorted({(where, word) for where, category in CATEGORIES for word in category.leaf_code})


@pytest.mark.parametrize(("where", "word"), WORDS, ids=[f"{w}:{c}" for w, c in WORDS])
def test_each_word_a_profile_category_looks_for_is_in_the_code(where: str, word: str) -> None:
    """The words match the source line that was running: some line under worker/ has it."""
    sources = (path.read_text() for path in (REPO / "worker").rglob("*.py"))
    assert any(word in text for text in sources), (
        f"{where} looks for {word!r} in the running line, and no module of worker/ has it"
    )
