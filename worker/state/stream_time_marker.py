"""The stream-time marker: how a task's stream time travels in its changelog, so that a
standby or a restoring task learns the stream time its active committed on any broker.

Committed offset metadata carries the stream time too (worker/tasks/stream_time.py), but
a broker may drop it (the test broker does: docs/platform-notes.md), and a store's own
copy (its offsets family) is local: nobody who restores or tails the changelog sees it.
So an active task that has a logged store writes, in each commit where its stream time
advanced, one marker after its changelog records in one of its logged changelogs (under
exactly-once inside the transaction, so an aborted commit's marker is never read). The
marker is a tombstone of a reserved key, like the release marker
(:mod:`worker.state.release_marker`): the restore path compares only tombstones' keys, and
records the stream time the header carries in the store's offsets family in the batch
that restores the records before it, never as data. A standby turned active and a
restored task then resume with it (``Store.committed_stream_time``).

Never written to a table's changelog: that topic is the user's source topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

STREAM_TIME_KEY = b"\x00worker.stream_time\x00"
STREAM_TIME_HEADER = "worker.stream_time"


def marker_headers(stream_time: int) -> list[tuple[str, bytes]]:
    """The marker's one header: ``stream_time`` (ms) as 8 big-endian signed bytes."""
    return [(STREAM_TIME_HEADER, stream_time.to_bytes(8, "big", signed=True))]


def stream_time_of(headers: Sequence[tuple[str, Any]] | None) -> int:
    """The stream time a marker's headers carry; -1 (unknown) for none or garbage."""
    for name, value in headers or ():
        if name == STREAM_TIME_HEADER and isinstance(value, bytes) and len(value) == 8:
            return max(-1, int.from_bytes(value, "big", signed=True))
    return -1
