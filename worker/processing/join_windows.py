"""Stream-stream join windows, and the buffer store view a join's processors get.

``JoinWindows(before_ms, after_ms, grace_ms)`` (Kafka Streams' ``JoinWindows``, KIP-633):
a left record at ``t`` joins right records with a time in ``[t - before, t + after]``,
a right record at ``t`` left ones in ``[t - after, t + before]``; ``grace_ms`` is how
far behind the join's stream time a record may be and still join. A store whose spec
carries join windows is a join buffer (``worker/state/join_buffer.py``) retaining
``before + after + grace`` of records; processors get a :class:`JoinBufferView` of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.processing.windows import InvalidWindow
from worker.state.contracts import RawJoinBuffer


@dataclass(frozen=True, slots=True)
class JoinWindows:
    """The join's time bounds (see the module doc).

    Raises:
        InvalidWindow: a negative ``before_ms``, ``after_ms`` or ``grace_ms`` (naming it).
    """

    before_ms: int
    after_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        for key in ("before_ms", "after_ms", "grace_ms"):
            value = getattr(self, key)
            if type(value) is not int or value < 0:
                raise InvalidWindow(key, f"must be an int >= 0 (ms), got {value!r}")

    @property
    def retention_ms(self) -> int:
        """How long a buffered record may still find a partner: a partner arrives at
        most ``grace`` behind stream time and reaches ``before``/``after`` back."""
        return self.before_ms + self.after_ms + self.grace_ms

    @property
    def kind(self) -> str:
        return "join"


class JoinBufferView:
    """A join buffer for the join's processors: bytes in, bytes out (the join encodes
    with its own serdes); ``late_record()`` counts and logs a record the join dropped as
    late."""

    __slots__ = ("name", "raw")

    def __init__(self, name: str, raw: RawJoinBuffer) -> None:
        self.name = name
        self.raw = raw

    @property
    def observed_ms(self) -> int:
        return self.raw.observed_ms

    def late_record(self, partition: int | None, key: bytes | None, late_ms: int) -> None:
        self.raw.events.late_record(partition, key, late_ms)
