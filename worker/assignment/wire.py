"""Compact binary building blocks of the version-2 user data (:mod:`worker.assignment.model`).

A group's metadata (every member's subscription and assignment) is one record in
Kafka's ``__consumer_offsets``, 1 MiB at most by default, so what each member sends
and receives must stay small at a thousand members. The blocks:

* unsigned integers as LEB128 varints (7 bits a byte), signed ones zigzag-encoded
  first, so -1 and small numbers take one byte;
* strings as a varint byte length and UTF-8; an id (process id, client key) that is a
  canonical UUID as a tag and its 16 bytes, anything else as a tag and a string;
* a set of tasks as its sub-topologies, each with its partitions in ascending order as
  gaps (``p - previous - 1``): consecutive partitions cost one byte each.

:class:`Reader` raises ``ValueError`` on truncated or impossible input; the model turns
it into ``MalformedUserData``. Pure, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from itertools import groupby

from worker.assignment.task_id import TaskId

_ID_UUID = 1
_ID_TEXT = 0


class Writer:
    """Appends blocks to a growing buffer; :meth:`bytes` returns it."""

    def __init__(self) -> None:
        self._out = bytearray()

    def bytes(self) -> bytes:
        return bytes(self._out)

    def byte(self, value: int) -> None:
        self._out.append(value)

    def uint(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"cannot write {value} as an unsigned integer")
        while value > 0x7F:
            self._out.append((value & 0x7F) | 0x80)
            value >>= 7
        self._out.append(value)

    def sint(self, value: int) -> None:
        self.uint(value * 2 if value >= 0 else -value * 2 - 1)

    def text(self, text: str) -> None:
        data = text.encode()
        self.uint(len(data))
        self._out += data

    def ident(self, text: str) -> None:
        if _is_canonical_uuid(text):
            self.uint(_ID_UUID)
            self._out += uuid.UUID(text).bytes
        else:
            self.uint(_ID_TEXT)
            self.text(text)

    def tasks(self, tasks: Iterable[TaskId]) -> None:
        ordered = sorted(set(tasks))
        groups = [
            (s, [t.partition for t in ts]) for s, ts in groupby(ordered, lambda t: t.subtopology)
        ]
        self.uint(len(groups))
        for subtopology, partitions in groups:
            self.uint(subtopology)
            self.uint(len(partitions))
            previous = -1
            for partition in partitions:
                self.uint(partition - previous - 1)
                previous = partition


class Reader:
    """Reads the blocks :class:`Writer` wrote, in the same order."""

    def __init__(self, data: bytes, position: int = 0) -> None:
        self._data = data
        self._at = position

    @property
    def done(self) -> bool:
        return self._at >= len(self._data)

    def uint(self) -> int:
        value = shift = 0
        while True:
            if self._at >= len(self._data):
                raise ValueError("truncated varint")
            byte = self._data[self._at]
            self._at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint longer than 64 bits")

    def sint(self) -> int:
        raw = self.uint()
        return raw >> 1 if not raw & 1 else -((raw + 1) >> 1)

    def _take(self, size: int) -> bytes:
        if self._at + size > len(self._data):
            raise ValueError(f"truncated: {size} bytes wanted at {self._at}")
        chunk = self._data[self._at : self._at + size]
        self._at += size
        return chunk

    def text(self) -> str:
        return self._take(self.uint()).decode()

    def ident(self) -> str:
        tag = self.uint()
        if tag == _ID_UUID:
            return str(uuid.UUID(bytes=self._take(16)))
        if tag == _ID_TEXT:
            return self.text()
        raise ValueError(f"unknown id tag {tag}")

    def tasks(self) -> list[TaskId]:
        found: list[TaskId] = []
        for _ in range(self.uint()):
            subtopology = self.uint()
            previous = -1
            for _ in range(self.uint()):
                previous += self.uint() + 1
                found.append(TaskId(subtopology, previous))
        return found


def _is_canonical_uuid(text: str) -> bool:
    if len(text) != 36:
        return False
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
