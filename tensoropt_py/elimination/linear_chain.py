"""Linear-chain marking (TensorOpt Alg. 2, "Mark nodes on the linear graph").

Before elimination the first operator of every connected component (in topological
order; ties by smallest index, where the paper breaks them randomly) is marked. During
elimination marked nodes are never eliminated, and whenever the last marked node of a
chain has exactly one neighbour besides its predecessor, that neighbour is marked too.

We count *all* neighbours (not only downstream ones) so that the marked nodes provably
stay a simple path: a marked node that is not the last of its chain has no unmarked
neighbour, so no elimination can ever attach a new edge to it; only the chain's last
node can change (gain edges from node elimination, absorb leaves, or absorb a merged
node). When no unmarked node is left next to a chain, the chain is complete and LDP
(Alg. 3) runs on it.
"""

from __future__ import annotations

__all__ = ["ChainMarker"]


class ChainMarker:
    """The marked chains of a working graph."""

    def __init__(self, g, topological_order):
        self.g = g
        self.chains: list[list[int]] = []
        self.marked: set[int] = set()
        self.active: list[int] = []
        seen: set[int] = set()
        pos = {x: r for r, x in enumerate(topological_order)}
        for start in sorted(g.nodes, key=lambda x: pos.get(x, x)):
            if start in seen:
                continue
            comp = self._component(start)
            seen |= comp
            self.marked.add(start)
            self.chains.append([start])
            self.active.append(len(self.chains) - 1)

    def copy(self, g):
        """This marking state on the snapshot ``g`` of its graph."""
        new = object.__new__(ChainMarker)
        new.g = g
        new.chains = [list(c) for c in self.chains]
        new.marked = set(self.marked)
        new.active = list(self.active)
        return new

    def _component(self, start):
        comp = {start}
        stack = [start]
        while stack:
            x = stack.pop()
            for y in self.g.adj[x]:
                if y not in comp:
                    comp.add(y)
                    stack.append(y)
        return comp

    def extend(self):
        """Extend every active chain as far as possible; returns the number of nodes marked."""
        n = 0
        still = []
        for ci in self.active:
            chain = self.chains[ci]
            while True:
                last = chain[-1]
                prev = chain[-2] if len(chain) > 1 else None
                others = [w for w in self.g.adj[last] if w != prev]
                if len(others) == 1 and others[0] not in self.marked:
                    self.marked.add(others[0])
                    chain.append(others[0])
                    n += 1
                    continue
                break
            if others:
                still.append(ci)
        self.active = still
        return n

