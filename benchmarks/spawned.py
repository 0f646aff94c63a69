"""Measuring in a process of its own, spawned (not forked), for the benchmarks that run the
task layer in-process (:mod:`benchmarks.per_record`, :mod:`benchmarks.dsl_cost`).

Spawned, because the task layer starts RocksDB's background threads, and a process forked
later from one that has them (the memory benchmark forks its store fillers) waits forever
for threads it does not have; a fresh process also measures on a heap no earlier
benchmark has fragmented. Its log lines are kept to warnings.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from benchmarks.harness import BenchmarkFailed, RunContext
from worker.observability import configure_logging

T = TypeVar("T")
CHILD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class _Failed:
    traceback: str


def measure_in_child(
    ctx: RunContext, measure: Callable[..., T], *args: Any, timeout_s: float = CHILD_TIMEOUT_S
) -> T:
    """``measure(*args)`` (a module-level function; arguments and result picklable) in a
    spawned process that ``ctx`` owns, so it is stopped by its handle on every way out.

    Raises BenchmarkFailed with the child's traceback when ``measure`` raised, or when the
    child sent nothing within ``timeout_s``.
    """
    spawn = multiprocessing.get_context("spawn")
    receiver, sender = spawn.Pipe(duplex=False)
    child = spawn.Process(target=_child, args=(measure, args, sender))
    ctx.own(child.start, lambda: stop(child))
    sender.close()
    if not receiver.poll(timeout_s):
        raise BenchmarkFailed(f"the measuring process sent nothing in {timeout_s:.0f}s")
    outcome = receiver.recv()
    child.join(30)
    if isinstance(outcome, _Failed):
        raise BenchmarkFailed(f"the measuring process failed:\n{outcome.traceback}")
    return cast(T, outcome)


def _child(measure: Callable[..., object], args: tuple[Any, ...], sender: Any) -> None:
    """In the spawned process: send what ``measure`` returns, or its traceback."""
    configure_logging("warning", "console")
    try:
        sender.send(measure(*args))
    except Exception:
        sender.send(_Failed(traceback.format_exc(limit=8)))
    finally:
        sender.close()


def stop(child: multiprocessing.process.BaseProcess) -> None:
    """Stop the measuring process we started (by its handle, so by its PID)."""
    if child.is_alive():
        child.terminate()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join(10)
