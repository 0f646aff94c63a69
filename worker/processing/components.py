"""The connected components of a topology's graph: which nodes and stores form one
sub-topology (``topology.py``'s ``build``)."""

from __future__ import annotations


class Components:
    """Union-find over node names, keeping the insertion order of each group's first node.

    Owned by ``Topology.build``: its groups are the sub-topologies, so their numbering
    (the first node's insertion order) is part of every task id.
    """

    def __init__(self, order: list[str]) -> None:
        self._order = list(order)
        self._parent: dict[str, str] = {name: name for name in order}

    def _find(self, name: str) -> str:
        self._parent.setdefault(name, name)
        while self._parent[name] != name:
            self._parent[name] = self._parent[self._parent[name]]
            name = self._parent[name]
        return name

    def union(self, a: str, b: str) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[rb] = ra

    def groups(self) -> list[list[str]]:
        """The groups holding at least one node of ``order``, by their first such node."""
        by_root: dict[str, list[str]] = {}
        for name in list(self._parent):
            by_root.setdefault(self._find(name), []).append(name)
        rank = {name: i for i, name in enumerate(self._order)}
        ordered = sorted(by_root.values(), key=lambda g: min(rank.get(n, len(rank)) for n in g))
        return [g for g in ordered if any(n in rank for n in g)]
