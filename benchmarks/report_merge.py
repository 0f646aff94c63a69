"""``python -m benchmarks --update``: a run's report merged into the report already there.

A run of a few benchmarks (say, three of them on a second broker) would otherwise
replace ``docs/benchmarks.md`` with only those. With ``--update`` each section of the
new report replaces the old section of the same title and its summary rows; every other
section stays as it was, marked with the date of the run that measured it. A section new
to the file goes after the one whose title it extends (``Restore (Apache Kafka 4.1.1)``
after ``Restore``), else at the end. Pure text in, text out: the file is the one
:func:`benchmarks.report.render` writes (``## `` headings, summary rows that link to
their section).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SUMMARY = "Summary"
MACHINE = "Machine and versions"
HOW_TO_RUN = "How to run"
_ROW_ANCHOR = re.compile(r"^\| \[[^\]]*\]\(#(?P<anchor>[^)]+)\)")
_MEASURED = re.compile(r"^Measured (?P<date>.+?) by ", re.M)
KEPT = "_Not re-run: kept from the run of {date} (its machine and versions were as listed then)._"


@dataclass
class Parsed:
    """A report split at its ``## `` headings."""

    head: list[str]  # everything before the first heading
    summary: list[str]  # the summary's lines up to its first row
    rows: list[str]  # the summary's rows (each links to its section)
    sections: dict[str, list[str]] = field(default_factory=dict)  # title -> lines after it

    @property
    def date(self) -> str:
        found = _MEASURED.search("\n".join(self.head))
        return found["date"] if found else "an earlier date"


def anchor(title: str) -> str:
    """The markdown anchor of a heading (as :func:`benchmarks.report._anchor`)."""
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -")
    return keep.replace(" ", "-")


def parse(text: str) -> Parsed:
    head: list[str] = []
    sections: dict[str, list[str]] = {}
    current = head
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        else:
            current.append(line)
    summary = sections.pop(SUMMARY, [])
    rows = [line for line in summary if _ROW_ANCHOR.match(line)]
    first_row = summary.index(rows[0]) if rows else len(summary)
    return Parsed(head, summary[:first_row], rows, sections)


def _order(old: list[str], new: list[str]) -> list[str]:
    """The old titles, then each new one after the title it extends (else last)."""
    order = list(old)
    for title in new:
        if title in order:
            continue
        bases = [t for t in order if title.startswith(t + " (")]
        if bases:
            at = order.index(bases[0]) + 1
            while at < len(order) and order[at].startswith(bases[0] + " ("):
                at += 1
            order.insert(at, title)
        else:
            order.append(title)
    return order


def merge(new_text: str, old_text: str) -> str:
    """``new_text`` (a run's report) merged into ``old_text`` (the report already there)."""
    new, old = parse(new_text), parse(old_text)
    fixed = (MACHINE, HOW_TO_RUN)
    titles = _order(
        [t for t in old.sections if t not in fixed], [t for t in new.sections if t not in fixed]
    )
    rows: list[str] = []
    body: list[str] = []
    for title in titles:
        source = new if title in new.sections else old
        rows += [r for r in source.rows if _row_anchor(r) == anchor(title)]
        lines = source.sections[title]
        if source is old and not any(line.startswith("_Not re-run:") for line in lines):
            lines = ["", KEPT.format(date=old.date), *lines]
        body += [f"## {title}", *lines]
    out = [*new.head, f"## {SUMMARY}", *new.summary, *rows, ""]
    for title in fixed[:1]:
        out += [f"## {title}", *new.sections.get(title, [])]
    out += body
    if HOW_TO_RUN in new.sections:
        out += [f"## {HOW_TO_RUN}", *new.sections[HOW_TO_RUN]]
    return "\n".join(out).rstrip() + "\n"


def _row_anchor(row: str) -> str:
    found = _ROW_ANCHOR.match(row)
    return found["anchor"] if found else ""
