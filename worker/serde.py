"""Key and value encodings shared by stores, changelogs, sinks and the Spark loaders.

One serde object turns Python values into the exact bytes that go into Kafka and RocksDB
and back. Stores keep bytes, so a table written by a Spark job with the same serde reads
back identically in the worker. ``None`` always means "no value" (a delete), never an
encoded null.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson


class SerdeError(ValueError):
    """Bytes that do not decode, or a value that does not encode."""


class Serde(Protocol):
    name: str

    def serialize(self, value: Any) -> bytes | None: ...

    def deserialize(self, data: bytes | None) -> Any: ...


class BytesSerde:
    """Raw bytes in and out: the zero-cost choice when the user handles encoding."""

    name = "bytes"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SerdeError(f"bytes serde needs bytes, got {type(value).__name__}")
        return bytes(value)

    def deserialize(self, data: bytes | None) -> Any:
        return data


class StrSerde:
    """UTF-8 text; undecodable bytes raise SerdeError rather than being replaced."""

    name = "str"

    def serialize(self, value: Any) -> bytes | None:
        if type(value) is str:
            return value.encode()
        if value is None:
            return None
        if not isinstance(value, str):
            raise SerdeError(f"str serde needs str, got {type(value).__name__}")
        return value.encode("utf-8")

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerdeError(f"not UTF-8: {exc}") from exc


class JsonSerde:
    """JSON via orjson (several times faster than ``json`` on the per-record path)."""

    name = "json"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return orjson.dumps(value)
        except TypeError as exc:
            raise SerdeError(f"not JSON-serialisable: {exc}") from exc

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise SerdeError(f"not JSON: {exc}") from exc


BYTES: Serde = BytesSerde()
STR: Serde = StrSerde()
JSON: Serde = JsonSerde()

_BY_NAME: dict[str, Serde] = {s.name: s for s in (BYTES, STR, JSON)}


Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]


def _json_kept(value: Any) -> bytes:
    """``orjson.dumps(value)`` as a bytes object of its own size (see ``fast_serializer``)."""
    return bytes(memoryview(orjson.dumps(value)))


def fast_serializer(serde: Serde, kept: bool = False) -> Encode:
    """``serde.serialize``, or for a built-in serde the C function behind it.

    ``kept``: the bytes outlive the record (a store's write buffer and read cache keep
    them until and past the commit). orjson builds its output in a 1 KiB buffer that it
    then shrinks in place, so each of its results holds a glibc chunk split off a larger
    one; hundreds of thousands of those kept alive fragment the heap until every
    ``orjson.dumps`` pays for the allocator's search (figures: docs/operations.md,
    "Processing speed"). A kept JSON value is copied into a bytes object of its own size,
    which lets the shrunk buffer go at once.

    The per-record path calls a serde several times per record, and a Python method call
    was a large share of that cost (issue 8). The C function returns exactly what
    ``serialize`` returns for every value other than None, which callers must handle
    first (``JSON.serialize(None)`` is None, ``orjson.dumps(None)`` is ``b"null"``). For a
    value it cannot encode it may raise something other than SerdeError: callers then call
    ``serde.serialize`` itself, which raises the serde's own error.
    """
    if type(serde) is JsonSerde:
        return _json_kept if kept else orjson.dumps
    if type(serde) is StrSerde:
        return str.encode
    return serde.serialize


def fast_deserializer(serde: Serde) -> Decode:
    """``serde.deserialize``, or for a built-in serde the C function behind it.

    Same contract as :func:`fast_serializer`: equal results for every input but None,
    which callers handle first; on an exception, call ``serde.deserialize`` for its error.
    """
    if type(serde) is JsonSerde:
        return orjson.loads
    if type(serde) is StrSerde:
        return bytes.decode
    return serde.deserialize


class Codec:
    """A serde with the C functions behind it: the one statement of how the per-record
    path encodes and decodes.

    The rule, in :meth:`encode` and :meth:`decode`: None first (the C functions disagree
    with the serde about None), then the C function, then, if that raised, the serde
    itself (its own error, or its result should the C function be stricter).

    It is the one helper for "the C function, or else the serde": the operators
    (``worker.operators``), the windowed views and the scans call :meth:`encode` and
    :meth:`decode`, and nothing else restates the rule. Three per-record paths call
    ``fast_encode`` and ``fast_decode`` inline for values other than None and hand
    everything else to :meth:`encode` / :meth:`decode`: the task graph's sources and sinks
    (``processing/graph.py``), the key-value view's ``get`` and ``put``
    (``processing/store_views.py``) and the versioned view's as-of read, a stream-table
    join's lookup (``processing/versioned_views.py``). A method call there instead costs
    every record: about 1 us of 8 in a count-and-sum loop through the graph, measured when
    the operators moved (issue 30). tests/property/test_store_views.py holds the views to
    the serde, and this rule to it too; tests/property/test_bad_input.py feeds the graph
    bytes of every kind.
    """

    __slots__ = ("serde", "fast_encode", "fast_decode")

    def __init__(self, serde: Serde, kept: bool = False) -> None:
        """``kept``: see :func:`fast_serializer`."""
        self.serde = serde
        self.fast_encode = fast_serializer(serde, kept)
        self.fast_decode = fast_deserializer(serde)

    def encode(self, value: Any) -> bytes | None:
        """``serde.serialize(value)``, through the C function where it applies."""
        if value is None:
            return self.serde.serialize(None)
        try:
            return self.fast_encode(value)  # type: ignore[no-any-return]
        except Exception:
            return self.serde.serialize(value)

    def decode(self, data: bytes | None) -> Any:
        """``serde.deserialize(data)``, through the C function where it applies."""
        if data is None:
            return self.serde.deserialize(None)
        try:
            return self.fast_decode(data)
        except Exception:
            return self.serde.deserialize(data)


def by_name(name: str) -> Serde:
    """Look a built-in serde up by name (used by CLI tools and Spark jobs)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SerdeError(f"unknown serde {name!r}; known: {sorted(_BY_NAME)}") from None
