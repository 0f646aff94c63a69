"""What every join takes: its kind (inner, left, outer) and a joiner, checked once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from worker.errors import TopologyError

Joiner = Callable[[Any, Any], Any]
Kind = Literal["inner", "left", "outer"]
KINDS: tuple[Kind, ...] = ("inner", "left", "outer")


def check_join(name: str, kind: str, joiner: object) -> None:
    """Raises TopologyError: an unknown kind, or a joiner that is not callable (naming
    the join: the topology is being built, nothing runs yet)."""
    if kind not in KINDS:
        raise TopologyError(f"join {name!r}: kind must be one of {KINDS}, got {kind!r}")
    if not callable(joiner):
        raise TopologyError(f"join {name!r}: joiner must be callable")
