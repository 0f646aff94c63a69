"""Opening a task's store as its spec says: key-value, or windowed with its layout."""

from __future__ import annotations

from pathlib import Path

from worker.processing.topology import StoreSpec
from worker.processing.windows import SessionWindows, SlidingWindows
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store
from worker.state.window_store import WindowLayout
from worker.state.window_stores import FixedWindowStore, SessionStore


def window_layout(spec: StoreSpec) -> WindowLayout | None:
    """The windowed layout of ``spec``'s store; None for a key-value store."""
    windows = spec.windows
    if windows is None:
        return None
    if isinstance(windows, SessionWindows | SlidingWindows):
        ahead = windows.time_difference_ms + 1 if isinstance(windows, SlidingWindows) else 0
        return WindowLayout(
            segmented=True,
            retention_ms=windows.retention_ms,
            hold_until_emitted=spec.hold_until_emitted,
            max_ahead_ms=ahead,
        )
    return WindowLayout(
        segmented=False,
        retention_ms=windows.retention_ms,
        size_ms=windows.size_ms,
        advance_ms=windows.advance_ms,
        hold_until_emitted=spec.hold_until_emitted,
    )


def open_store(spec: StoreSpec, path: Path, env: RocksDBEnv) -> Store:
    """Open ``spec``'s store at ``path``.

    Raises: as :meth:`Store.open`.
    """
    layout = window_layout(spec)
    if layout is None:
        return Store.open(path, env, spec.name)
    kind = SessionStore if layout.segmented else FixedWindowStore
    return kind.open_windowed(path, env, spec.name, layout)
