"""What a store's read does, as three calls a caller can make inline.

The typed store views (``worker.processing.store_views.KeyValueStore``) read on every record;
calling ``Store.get`` would add a Python call per read, so a store hands them its
:class:`ReadPath` and they make the three calls themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from worker.state.read_cache import Lookup


@dataclass(frozen=True, slots=True)
class ReadPath:
    """``Store.get`` in three calls: ``buffered(key, default)``, then ``cached(key,
    default)``, each returning ``default`` when the key is not there (a buffered or cached
    ``None`` is an answer: absent); then ``miss(key)``, a RocksDB point read that the
    cache remembers.

    Contract: made once by its store when the store opens; ``Store.read_path()`` returns
    that same object every time. Its lookups stay valid for the store's whole life:
    ``buffered`` and ``cached`` are the ``lookup`` of the store's ``WriteBuffer`` and
    ``ReadCache``, each bound to a dict its owner never replaces (a ``Final`` attribute,
    changed in place only), so they always see the current buffer and cache.
    After the store closes both find nothing and ``miss`` raises ``StoreClosedError``.
    """

    buffered: Lookup
    cached: Lookup
    miss: Callable[[bytes], bytes | None]
