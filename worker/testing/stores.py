"""A store as a test reads it through the driver: every partition's copy at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.processing.built_topology import StoreSpec
from worker.processing.context import ProcessorContext
from worker.processing.graph import window_view
from worker.processing.store_views import KeyValueStore
from worker.processing.window_views import SessionStoreView, WindowStoreView


class DriverStore:
    """Read-only: ``get``/``all`` for key-value stores and tables; ``fetch``/``fetch_all``
    for window stores, ``fetch_all`` for session stores (the views of
    :mod:`worker.processing.window_views`, merged over partitions)."""

    def __init__(
        self, spec: StoreSpec, raws: Sequence[Any], contexts: Sequence[ProcessorContext]
    ) -> None:
        self.name = spec.name
        self._spec = spec
        if spec.windows is None:
            self._kv = [
                KeyValueStore(spec.name, raw, spec.key_serde, spec.value_serde, True)
                for raw in raws
            ]
            self._windows: list[Any] = []
        else:
            self._kv = []
            self._windows = [
                window_view(spec, raw, ctx) for raw, ctx in zip(raws, contexts, strict=True)
            ]

    def get(self, key: Any) -> Any:
        """The value of ``key`` (None: absent) in a key-value store or table."""
        for view in self._kv:
            value = view.get(key)
            if value is not None:
                return value
        return None

    def all(self) -> dict[Any, Any]:
        """Every key and value of a key-value store or table."""
        found: dict[Any, Any] = {}
        for view in self._kv:
            with view.range() as scan:
                found.update(scan)
        return found

    def fetch(self, key: Any, from_ms: int, to_ms: int) -> list[tuple[int, Any]]:
        """A window store's ``(start_ms, value)`` of ``key`` for windows starting in range."""
        found: list[tuple[int, Any]] = []
        for view in self._windows:
            if isinstance(view, WindowStoreView):
                found.extend(view.fetch(key, from_ms, to_ms))
        return sorted(found, key=lambda pair: pair[0])

    def fetch_all(self, from_ms: int, to_ms: int) -> list[Any]:
        """Every window in range: ``(key, start_ms, value)`` for window stores,
        ``(key, start_ms, end_ms, value)`` for session stores (by end time)."""
        found: list[Any] = []
        for view in self._windows:
            if isinstance(view, WindowStoreView | SessionStoreView):
                found.extend(view.fetch_all(from_ms, to_ms))
        return found
