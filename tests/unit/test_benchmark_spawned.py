"""A benchmark's measuring process (benchmarks/spawned.py): its result comes back, and its
failure comes back as BenchmarkFailed carrying the child's traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.harness import BenchmarkFailed, RunContext
from benchmarks.spawned import measure_in_child


def child_pid_and_sum(numbers: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(numbers)


def fails(reason: str) -> None:
    raise ValueError(reason)


def test_the_result_of_the_measuring_process_comes_back(tmp_path: Path) -> None:
    ctx = RunContext(tmp_path, tmp_path, quick=True)
    try:
        pid, total = measure_in_child(ctx, child_pid_and_sum, [1, 2, 3])
    finally:
        ctx.close()
    assert total == 6 and pid != os.getpid()


def test_a_failure_in_the_measuring_process_is_raised_with_its_traceback(tmp_path: Path) -> None:
    ctx = RunContext(tmp_path, tmp_path, quick=True)
    try:
        with pytest.raises(BenchmarkFailed, match="ValueError: no input fetched"):
            measure_in_child(ctx, fails, "no input fetched")
    finally:
        ctx.close()
