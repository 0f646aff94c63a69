"""Output stalls: how long each task went without producing, read from output timestamps.

Pure functions shared by the demo, the availability benchmark and the cooperative
rebalancing tests. A task's output is its own partition of a topic written one record per
input (keys stay in their partition), so a silent stretch in a partition's timestamps is
a stretch in which that task produced nothing, whoever owned it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def max_gap(timestamps: Sequence[float], start: float, end: float) -> float:
    """Longest stretch in [start, end] without a timestamp (all in the same unit).

    The edges count: from ``start`` to the first timestamp in the window and from the last
    one to ``end``, so a partition still silent at the end of the window shows its stall.
    """
    inside = sorted(t for t in timestamps if start <= t <= end)
    points = [start, *inside, end]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def gap_intervals(
    timestamps: Sequence[float], start: float, end: float, longer_than: float
) -> list[tuple[float, float]]:
    """The silent stretches in [start, end] longer than ``longer_than`` as (from, to)."""
    inside = sorted(t for t in timestamps if start <= t <= end)
    points = [start, *inside, end]
    return [(a, b) for a, b in zip(points, points[1:], strict=False) if b - a > longer_than]


def longest_stalls(
    timestamps: Mapping[str, Sequence[float]], start: float, end: float
) -> dict[str, float]:
    """Per task (or partition), its longest silent stretch in [start, end]."""
    return {task: max_gap(times, start, end) for task, times in sorted(timestamps.items())}


def stalled_share(stalls: Mapping[str, float], longer_than: float) -> float:
    """The share of tasks whose longest stall exceeds ``longer_than`` (0 with no tasks)."""
    if not stalls:
        return 0.0
    return sum(1 for s in stalls.values() if s > longer_than) / len(stalls)
