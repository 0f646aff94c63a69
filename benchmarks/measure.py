"""Pure computations over what the harness observed: rates, gaps. No I/O."""

from __future__ import annotations

from collections.abc import Sequence

from worker.dev.stalls import gap_intervals, max_gap

__all__ = ["crossing_time", "gap_intervals", "max_gap", "steady_rate"]


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
