"""Working nodes and edges of the graph being simplified (internal).

See :mod:`.working_graph` for their meaning; they live apart so that the eliminations
(:mod:`.edge_elimination`) and the graph (:mod:`.working_graph`) import them without
importing each other.
"""

from __future__ import annotations

import numpy as np

__all__ = ["WNode", "WEdge"]


class WNode:
    __slots__ = ("id", "K", "factors")

    def __init__(self, id, K, factors):
        self.id = id
        self.K = int(K)
        self.factors = list(factors)  # [(FTable, cells (K,) int64)]

    def tables(self):
        return [f[0] for f in self.factors]

    def cells(self, ks):
        return [f[1][ks] for f in self.factors]


class WEdge:
    __slots__ = ("u", "v", "umap", "vmap", "table", "B")

    def __init__(self, u, v, umap, vmap, table, B):
        self.u = u
        self.v = v
        self.umap = np.asarray(umap, dtype=np.int64)
        self.vmap = np.asarray(vmap, dtype=np.int64)
        self.table = table
        self.B = int(B)

    def view(self, x):
        """``(xmap, ymap, sx, sy, y)``: cell of (k_x, k_y) is ``xmap[k_x]*sx + ymap[k_y]*sy``."""
        if x == self.u:
            return self.umap, self.vmap, self.B, 1, self.v
        return self.vmap, self.umap, 1, self.B, self.u

    def other(self, x):
        return self.v if x == self.u else self.u
