"""The ``with`` half of an object that holds a resource until :meth:`Closing.close`.

Scans (a store's raw scan, the TTL store's live scan, a processor's decoded view) each
hold a RocksDB iterator that must be released at once rather than at garbage collection,
and a driven worker process (``dev/processes.py``) must be killed by its PID; they share
this mixin so that each one states only what its ``close`` releases.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """A context manager whose exit calls :meth:`close` (which subclasses define)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
