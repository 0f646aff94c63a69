"""constraints.txt pins the versions CI tested, and the image is built with them and on an
exactly versioned base image; ``make install`` resolves as before."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"not an exact pin: {line!r}"
            found[canonicalize_name(name)] = version.strip()
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in (*project["dependencies"], *extras)]


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is not in constraints.txt (make constraints)"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pinned[name]}, outside {requirement}"
        )


def test_the_image_installs_with_the_constraints_on_an_exact_base_image() -> None:
    text = (REPO / "Dockerfile").read_text()
    base = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert base and all(
        re.search(r":\d+\.\d+\.\d+[-\w.]*(@sha256:[0-9a-f]{64})?$", b) for b in base
    )
    assert re.search(r"^COPY .*constraints\.txt", text, flags=re.MULTILINE)
    assert re.search(r"pip install --constraint \S*constraints\.txt", text)
    assert "constraints.txt" not in (REPO / ".dockerignore").read_text().split("\n", 1)[1]


def test_make_install_does_not_use_the_constraints() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "pip install" in recipe and "constraint" not in recipe
