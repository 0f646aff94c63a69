"""``Handle``: what a ``KStream`` and a ``KTable`` both are, a node of the builder's plan
and the serdes of the records it forwards.

Every operation on a handle adds a processor after its node and hands back a new handle
whose serdes are the ones the operation was given, or else this handle's; the two
helpers here are that step, so the operations in ``stream.py`` and ``table.py`` only say
which processor and which serdes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from worker.processing.built_topology import InitFn, ProcessorFn
from worker.serde import Serde

if TYPE_CHECKING:
    from worker.dsl.builder import StreamsBuilder


class Handle:
    """A node of ``builder``'s plan whose records ``key_serde`` and ``value_serde`` read
    and write."""

    def __init__(
        self, builder: StreamsBuilder, node: str, key_serde: Serde, value_serde: Serde
    ) -> None:
        self._builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde

    def _child(
        self,
        prefix: str,
        fn: ProcessorFn,
        name: str | None,
        stores: Sequence[str] = (),
        init: InitFn | None = None,
    ) -> str:
        """A processor ``fn`` fed by this node, named ``name`` or ``<prefix>-<counter>``;
        ``init`` as ``Topology.add_processor``'s."""
        return self._builder._processor(prefix, fn, [self.node], name, stores, init)

    def _serdes(self, key_serde: Serde | None, value_serde: Serde | None) -> tuple[Serde, Serde]:
        """The serdes an operation was given, each one not given being this handle's."""
        return key_serde or self.key_serde, value_serde or self.value_serde
