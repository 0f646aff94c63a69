"""Keys in URLs and values in responses: the text of a query <-> the bytes a store holds.

A key arrives as one URL path segment, percent-decoded (a ``/`` inside a key is sent as
``%2F``). How that text becomes the stored key depends on the store's key serde:

- ``str``: the text itself, UTF-8 encoded;
- ``json``: the text is parsed as JSON and serialised again by the serde, so a string
  key is written with its quotes (``"acct-1"``, i.e. ``%22acct-1%22``), a number bare
  (``42``), an object as JSON (``{"a":1}``, key order as given);
- ``bytes``: ``hex:<hex digits>`` or ``base64:<url-safe base64>`` (padding optional);
  text without a prefix is read as hex;
- any other serde: the text is passed to its ``serialize``; what it refuses is a bad key.

A value is deserialised with the store's value serde and rendered as JSON: ``str`` and
``json`` values as they are, ``bytes`` values as a hex string (the reply then says
``"encoding": "hex"``), values of other serdes as JSON when they can be, else as text.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from worker.serde import Serde, SerdeError

HEX_PREFIX = "hex:"
BASE64_PREFIX = "base64:"


class BadKey(ValueError):
    """The key text cannot be turned into a key of the store (HTTP 400)."""


def key_bytes(serde: Serde, text: str) -> bytes:
    """The stored form of the key written as ``text`` (see the module doc). Raises BadKey."""
    if not text:
        raise BadKey("the key is empty")
    name = getattr(serde, "name", None)
    if name == "bytes":
        return _bytes_key(text)
    value: Any = text
    if name == "json":
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise BadKey(f"not JSON ({exc}); string keys need quotes, e.g. %22abc%22") from None
    try:
        encoded = serde.serialize(value)
    except (SerdeError, TypeError, ValueError) as exc:
        kind = name or type(serde).__name__
        raise BadKey(f"the store's key serde ({kind}) refused it: {exc}") from None
    if not isinstance(encoded, bytes):
        raise BadKey("the store's key serde produced no key")
    return encoded


def _bytes_key(text: str) -> bytes:
    if text.startswith(BASE64_PREFIX):
        body = text[len(BASE64_PREFIX) :]
        try:
            padded = body + "=" * (-len(body) % 4)
            return base64.b64decode(padded, altchars=b"-_", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadKey(f"not url-safe base64: {exc}") from None
    body = text[len(HEX_PREFIX) :] if text.startswith(HEX_PREFIX) else text
    try:
        return bytes.fromhex(body)
    except ValueError:
        raise BadKey(
            "a bytes key is hex:<hex digits>, base64:<url-safe base64>, or bare hex digits"
        ) from None


def render_value(serde: Serde, data: bytes) -> tuple[Any, str]:
    """(JSON-ready value, encoding): encoding is "hex" for bytes values, else "json".

    Raises SerdeError when the stored bytes do not decode with the value serde.
    """
    value = serde.deserialize(data)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex(), "hex"
    try:
        orjson.dumps(value)
    except TypeError:
        return str(value), "text"
    return value, "json"


def render_key(serde: Serde, data: bytes) -> Any:
    """The key as the reply shows it: decoded by the key serde, bytes as hex."""
    try:
        rendered, _ = render_value(serde, data)
    except SerdeError:
        return data.hex()
    return rendered
