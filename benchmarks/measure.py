"""Pure computations over what the harness observed: rates, gaps. No I/O."""

from __future__ import annotations

from collections.abc import Sequence


def crossing_time(samples: Sequence[tuple[float, float]], level: float) -> float:
    """When a non-decreasing sampled counter reached ``level``, interpolated linearly.

    ``samples`` are (time, count) in time order. Raises ValueError if it never did.
    """
    previous: tuple[float, float] | None = None
    for t, count in samples:
        if count >= level:
            if previous is None or count == previous[1]:
                return t
            t0, c0 = previous
            return t0 + (t - t0) * (level - c0) / (count - c0)
        previous = (t, count)
    raise ValueError(f"the counter never reached {level}")


def steady_rate(
    samples: Sequence[tuple[float, float]], total: float, low: float = 0.1, high: float = 0.9
) -> float:
    """Records/s while the counter went from ``low`` to ``high`` of ``total``.

    Leaving out the first and last tenth keeps start-up (first fetch, group join
    leftovers) and the tail (last partial batches, final commit) out of a steady rate,
    the same way for a worker's ``/metrics`` counter and for a baseline's own count.
    """
    start = crossing_time(samples, total * low)
    end = crossing_time(samples, total * high)
    if end <= start:
        raise ValueError("the counter did not advance between the two levels")
    return total * (high - low) / (end - start)


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
