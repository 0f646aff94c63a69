"""Writing restored records into a real store without a changelog, for store and task tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from worker.state.store import Store


def restore_pairs(
    store: Store,
    records: Iterable[tuple[bytes, bytes | None]],
    offsets: Mapping[tuple[str, int], int],
) -> None:
    """What the changelog reader does with a fetched batch: (key, value) pairs (``None``
    deletes) and the changelog offsets, written in one atomic batch."""
    batch = store.restore_batch()
    for key, value in records:
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    store.write_restored(batch, offsets)
