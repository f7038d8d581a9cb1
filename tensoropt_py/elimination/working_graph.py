"""The mutable graph that the eliminations simplify (internal).

A working node has ``K`` configs; its frontier for config ``k`` is the product of a few
*factors* ``table[cells[k]]`` (usually one; a lazy second factor avoids materialising
``K`` copies of a per-layout frontier after a layout-exploiting fold, see
:func:`~tensoropt_py.elimination.node_elimination.fold_leaf`).

A working edge between ``u`` and ``v`` always has the factored form of a
:class:`~tensoropt_py.engine.LayoutEdge`: the frontier of config pair ``(k_u, k_v)`` is
cell ``umap[k_u] * B + vmap[k_v]`` of its table. Dense edges simply have identity maps;
merging nodes (branch elimination) only composes the maps, never copies tables. There is
at most one edge per node pair: a second one is merged at once (edge elimination, Eq. 5).
"""

from __future__ import annotations

import numpy as np

from .edge_elimination import merge_edges
from .elements import WEdge, WNode

__all__ = ["WNode", "WEdge", "WGraph", "group_units"]


class WGraph:
    """Nodes, merged edges, detached final frontiers and counters of one tracking run."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.nodes: dict[int, WNode] = {}
        self.adj: dict[int, dict[int, WEdge]] = {}
        self.detached = []
        self.touched: set[int] = set()
        self.stats = {"node": 0, "leaf": 0, "edge": 0, "branch": 0, "heuristic": 0, "detach": 0,
                      "hub_first": 0}
        self.rank_cache = {}  # config rankings by the content they depend on (shared by snapshots)

    def snapshot(self):
        """An independent copy of the graph state (tables are shared, not copied; the
        caller pins them so that neither copy releases what the other still needs)."""
        h = WGraph(self.ctx)
        h.nodes = {i: WNode(i, n.K, n.factors) for i, n in self.nodes.items()}
        h.adj = {i: dict(a) for i, a in self.adj.items()}
        h.detached = list(self.detached)
        h.touched = set(self.touched)
        h.stats = dict(self.stats)
        h.rank_cache = self.rank_cache
        return h

    def add_node(self, i, K, factors):
        self.nodes[i] = WNode(i, K, factors)
        self.adj[i] = {}
        self.touched.add(i)

    def degree(self, x):
        return len(self.adj[x])

    def add_edge(self, e):
        """Insert working edge ``e``; merge it with an existing edge on the same pair (Eq. 5)."""
        old = self.adj[e.u].get(e.v)
        if old is not None:
            e = merge_edges(self, old, e)
        self.adj[e.u][e.v] = e
        self.adj[e.v][e.u] = e
        self.touched.add(e.u)
        self.touched.add(e.v)
        return e

    def remove_node(self, x):
        for y in self.adj[x]:
            del self.adj[y][x]
            self.touched.add(y)
        del self.adj[x]
        del self.nodes[x]
        self.touched.discard(x)

    def release_node(self, node):
        for tab, _ in node.factors:
            tab.release()

    def materialize(self, node):
        """Collapse a node's factors into one table (one product term per config)."""
        if len(node.factors) == 1 and np.array_equal(node.factors[0][1], np.arange(node.K)):
            return
        ks = np.arange(node.K)
        tab = self.ctx.combine_gen(node.tables(), node.K, 1, lambda lo, hi: np.stack(node.cells(ks[lo:hi]), axis=1))
        self.release_node(node)
        node.factors = [(tab, ks.copy())]


def group_units(g, node, *keys):
    """Group a node's configs by equal ``keys`` (layout classes); reduce each group once.

    Returns ``(tables, cols, rep)``: a "unit" ``u`` has frontier ``product_s tables[s][cols[s][u]]``
    and a representative config ``rep[u]`` (any config of the group: the edges only see
    the keys). Without any gain (every group a single config) the node's own factors are
    the units.
    """
    K = node.K
    if keys:
        key = np.zeros(K, dtype=np.int64)
        for k in keys:
            k = np.asarray(k, dtype=np.int64)
            key = key * (int(k.max()) + 1) + k
        _, rep, inv = np.unique(key, return_index=True, return_inverse=True)
        G = rep.shape[0]
    else:
        G, rep, inv = 1, np.zeros(1, dtype=np.int64), np.zeros(K, dtype=np.int64)
    if G == K:
        return node.tables(), node.cells(np.arange(K)), np.arange(K)
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=G)
    term_off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    M = g.ctx.combine(node.tables(), term_off, np.stack(node.cells(order), axis=1))
    return [M], [np.arange(G)], rep
