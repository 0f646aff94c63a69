"""Every ``python`` block of docs/dsl.md runs as it is (each through the test driver), and
the ``text`` block after one that prints is what it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "dsl.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def blocks() -> list[tuple[str, str, str | None]]:
    """(first line, code, the text block right after it if any) of each python block."""
    found = BLOCK.findall(DOC.read_text())
    out = []
    for i, (lang, code) in enumerate(found):
        if lang != "python":
            continue
        after = found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" else None
        out.append((code.splitlines()[0], code, after))
    return out


def test_the_page_has_an_example_for_every_section() -> None:
    assert len(blocks()) >= 10


@pytest.mark.parametrize(("first", "code", "printed"), blocks(), ids=lambda v: None)
def test_a_documented_example_runs(first: str, code: str, printed: str | None) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/dsl.md ({first})", "exec"), {"__name__": "docs_example"})
    if printed is not None:
        assert out.getvalue() == printed + "\n" or out.getvalue() == printed
