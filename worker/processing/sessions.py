"""Session merging: what a record does to its key's sessions, as a pure function.

A session is ``[start, end]`` (inclusive) over the times of its records. A record at ``ts``
joins every session within ``gap`` of it (``end >= ts - gap`` and ``start <= ts + gap``,
Kafka Streams' ``findSessions(key, ts - gap, ts + gap)``); those sessions and the record
become one session spanning all of them. With none in reach the record starts its own
session ``[ts, ts]``.

The operator applies a :class:`SessionMerge` in one step of its write buffer:

1. read the key's sessions in reach (``window_format.segment_ranges`` over ends from
   ``ts - gap``, keeping starts ``<= ts + gap``);
2. ``assign(ts, found, windows, observed)``: the merge, or None for a late record;
3. fold the aggregates of ``replaced`` with the user's merger, then the record with the
   aggregator; delete every ``replaced`` session and put the result under ``session``
   (a session's key holds its end, so a merged session moves);
4. emitting on update, forward a tombstone for each replaced session other than the
   result, then the result (Kafka does the same).

The order of records does not matter: applying any permutation of a key's records with
:func:`merge` gives the sessions of the sorted times split where consecutive times are
more than ``gap`` apart (the property test checks it), provided nothing closed meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from worker.processing.windows import SessionWindows, Window


@dataclass(frozen=True, slots=True)
class SessionMerge:
    """``session``: the key's session after the record; ``replaced``: the existing sessions
    it absorbs (by start), to delete (``session`` itself among them when the record fell
    inside one and changed nothing)."""

    session: Window
    replaced: tuple[Window, ...]

    @property
    def unchanged(self) -> bool:
        """The record fell inside one session: same bounds, only its aggregate changes."""
        return self.replaced == (self.session,)


def in_reach(session: Window, ts: int, gap_ms: int) -> bool:
    """True when a record at ``ts`` joins ``session``."""
    return session.end_ms >= ts - gap_ms and session.start_ms <= ts + gap_ms


def merge(ts: int, found: Iterable[Window], gap_ms: int) -> SessionMerge:
    """The session a record at ``ts`` makes of the key's sessions ``found``.

    ``found`` may hold more than those in reach (a store scan reads whole key ranges);
    the others are left alone.
    """
    replaced = tuple(sorted(s for s in found if in_reach(s, ts, gap_ms)))
    start = min((s.start_ms for s in replaced), default=ts)
    end = max((s.end_ms for s in replaced), default=ts)
    return SessionMerge(Window(min(start, ts), max(end, ts)), replaced)


def assign(
    ts: int, found: Iterable[Window], windows: SessionWindows, observed_ms: int
) -> SessionMerge | None:
    """:func:`merge`, or None when the record is late: the session it would make is
    closed at ``observed_ms`` (the record included), or it would absorb a closed one.

    The second case is real: a session closes ``gap + grace`` after its end, and a record
    up to ``gap + grace`` behind stream time still makes an open session of its own, so a
    record more than ``grace`` late can reach a closed session. Merging it would change a
    result emit-final has already sent, and its lateness for that session is over grace,
    so it is dropped. Kafka Streams checks the merged session only.
    """
    merged = merge(ts, found, windows.gap_ms)
    if windows.is_closed(merged.session, observed_ms):
        return None
    if any(windows.is_closed(s, observed_ms) for s in merged.replaced):
        return None
    return merged
