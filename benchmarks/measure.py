"""Pure computations over what the harness observed: rates, gaps. No I/O."""

from __future__ import annotations

from collections.abc import Sequence

from worker.dev.stalls import gap_intervals, max_gap

__all__ = [
    "crossing_time",
    "from_first_record",
    "gap_intervals",
    "max_gap",
    "steady_rate",
    "steady_rate_or_span",
    "value_at",
]


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


def value_at(samples: Sequence[tuple[float, float]], t: float) -> float:
    """A sampled quantity's value at time ``t``, interpolated linearly between the samples
    around it; before the first sample or after the last, that sample's value.

    ``samples`` are (time, value) in time order. Raises ValueError if there are none.
    """
    if not samples:
        raise ValueError("no samples")
    previous = samples[0]
    if t <= previous[0]:
        return previous[1]
    for sample in samples[1:]:
        if sample[0] >= t:
            (t0, v0), (t1, v1) = previous, sample
            return v1 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        previous = sample
    return previous[1]


def steady_rate_or_span(samples: Sequence[tuple[float, float]], total: float) -> float:
    """:func:`steady_rate`; for a run over within one sampling interval (quick mode's tiny
    input on a fast worker), the rate from its first sample to its last instead (NaN for
    a single instant)."""
    try:
        return steady_rate(samples, total)
    except ValueError:
        (t0, c0), (t1, c1) = samples[0], samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")


def from_first_record(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A records counter's samples from its last zero reading on (a worker's group join
    before it is not processing)."""
    zeros = [i for i, (_t, count) in enumerate(samples) if count == 0]
    return list(samples[zeros[-1] :] if zeros else samples)
