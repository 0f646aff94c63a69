"""The `.checkpoint` file: Kafka's text format, atomic replacement, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.state.checkpoint import (
    CheckpointError,
    read_checkpoint,
    replace_file_atomically,
    write_checkpoint,
)


def test_written_offsets_read_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    offsets = {("orders-changelog", 0): 41, ("orders-changelog", 1): 0, ("totals", 7): 2**40}

    write_checkpoint(path, offsets)

    assert read_checkpoint(path) == offsets


def test_file_uses_kafka_version_0_text_format(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"

    write_checkpoint(path, {("b", 1): 5, ("a", 0): 3})

    assert path.read_text() == "0\n2\na 0 3\nb 1 5\n"


def test_missing_file_reads_as_no_offsets(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / ".checkpoint") == {}


def test_writing_no_offsets_deletes_the_file(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("a", 0): 1})

    write_checkpoint(path, {})

    assert not path.exists()
    write_checkpoint(path, {})  # deleting a missing file is fine


def test_rewrite_replaces_content_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("a", 0): 1, ("b", 0): 2})

    write_checkpoint(path, {("a", 0): 9})

    assert read_checkpoint(path) == {("a", 0): 9}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".checkpoint"]


def test_replacement_is_a_rename_so_readers_see_old_or_new_file(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("a", 0): 1})
    old_inode = path.stat().st_ino
    with path.open() as reader_of_old_file:
        write_checkpoint(path, {("a", 0): 2})

        assert reader_of_old_file.read() == "0\n1\na 0 1\n"
    assert path.stat().st_ino != old_inode


def test_stale_temporary_file_from_a_crash_is_ignored_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("a", 0): 1})
    (tmp_path / ".checkpoint.tmp").write_text("0\n1\nhalf writ")

    assert read_checkpoint(path) == {("a", 0): 1}
    write_checkpoint(path, {("a", 0): 2})
    assert read_checkpoint(path) == {("a", 0): 2}
    assert not (tmp_path / ".checkpoint.tmp").exists()


def test_unknown_offset_minus_4_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    path.write_text("0\n2\na 0 -4\nb 0 7\n")

    assert read_checkpoint(path) == {("b", 0): 7}


def test_unknown_offset_can_be_written(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"

    write_checkpoint(path, {("a", 0): -4})

    assert path.read_text() == "0\n1\na 0 -4\n"
    assert read_checkpoint(path) == {}


def test_entries_separated_by_several_spaces_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    path.write_text("0\n1\na   3\t9\n")

    assert read_checkpoint(path) == {("a", 3): 9}


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("", 1),
        ("0\n", 2),
        ("1\n0\n", 1),
        ("0\nthree\n", 2),
        ("0\n1\na 0\n", 3),
        ("0\n1\na 0 1 extra\n", 3),
        ("0\n2\na 0 1\nb x 1\n", 4),
        ("0\n1\na 0 one\n", 3),
        ("0\n2\na 0 1\na 0 2\n", 4),
        ("0\n3\na 0 1\nb 0 2\n", 4),
        ("0\n1\na 0 1\nb 0 2\n", 4),
    ],
    ids=[
        "empty",
        "no-count",
        "unknown-version",
        "bad-count",
        "two-fields",
        "four-fields",
        "bad-partition",
        "bad-offset",
        "duplicate",
        "too-few-entries",
        "too-many-entries",
    ],
)
def test_malformed_file_raises_error_naming_file_and_line(
    tmp_path: Path, content: str, line: int
) -> None:
    path = tmp_path / ".checkpoint"
    path.write_text(content)

    with pytest.raises(CheckpointError) as raised:
        read_checkpoint(path)

    assert str(path) in str(raised.value)
    assert f"line {line}" in str(raised.value)


def test_file_that_is_not_utf8_raises_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / ".checkpoint"
    path.write_bytes(b"0\n1\n\xff 0 1\n")

    with pytest.raises(CheckpointError, match=str(path)):
        read_checkpoint(path)


@pytest.mark.parametrize(
    "offsets", [{("a", 0): -1}, {("a b", 0): 1}, {("", 0): 1}], ids=["negative", "space", "empty"]
)
def test_writing_an_invalid_entry_is_refused_and_keeps_the_old_file(
    tmp_path: Path, offsets: dict[tuple[str, int], int]
) -> None:
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("a", 0): 1})

    with pytest.raises(ValueError):
        write_checkpoint(path, offsets)

    assert read_checkpoint(path) == {("a", 0): 1}


def test_unwritable_directory_raises_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot write"):
        write_checkpoint(tmp_path / "missing-dir" / ".checkpoint", {("a", 0): 1})


def test_atomic_replace_writes_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "file"
    data = os.urandom(300_000)

    replace_file_atomically(path, data)

    assert path.read_bytes() == data
