"""Branch elimination (TensorOpt Eq. 6): merge a node into another one.

Merging ``x`` into ``y`` gives ``y`` the config space ``S_y x S_x`` (config
``c = k_y * K_x + k_x``) with frontier ``F(o_y, k_y) x F(o_x, k_x) x F(e_xy, k_x, k_y)``.
Every other edge of ``x`` or ``y`` is re-attached to the merged node by composing its
layout map with ``c -> k_x`` or ``c -> k_y`` (no table is copied); edges that now join
the same pair are merged (edge elimination). Exact.
"""

from __future__ import annotations

import numpy as np

from .working_graph import WEdge

__all__ = ["merge_nodes"]


def merge_nodes(g, x, y):
    """Merge node ``x`` into node ``y`` (they need not be adjacent). Returns the new K of ``y``."""
    nx, ny = g.nodes[x], g.nodes[y]
    Kx, Ky = nx.K, ny.K
    Kn = Kx * Ky
    e = g.adj[x].get(y)
    parents = ny.tables() + nx.tables() + ([e.table] if e is not None else [])
    if e is not None:
        ymap, xmap, sy, sx, _ = e.view(y)

    def make_terms(lo, hi):
        c = np.arange(lo, hi)
        ky, kx = c // Kx, c % Kx
        cols = ny.cells(ky) + nx.cells(kx)
        if e is not None:
            cols.append(ymap[ky] * sy + xmap[kx] * sx)
        return np.stack(cols, axis=1)

    T = g.ctx.combine_gen(parents, Kn, 1, make_terms)
    c = np.arange(Kn)
    kyc, kxc = c // Kx, c % Kx
    new_edges = []
    for old, kmap in ((x, kxc), (y, kyc)):
        for w, ed in g.adj[old].items():
            if w in (x, y):
                continue
            if ed.u == old:
                new_edges.append(WEdge(y, w, ed.umap[kmap], ed.vmap, ed.table, ed.B))
            else:
                new_edges.append(WEdge(w, y, ed.umap, ed.vmap[kmap], ed.table, ed.B))
    g.release_node(nx)
    g.release_node(ny)
    if e is not None:
        e.table.release()
    g.remove_node(x)
    g.remove_node(y)
    g.add_node(y, Kn, [(T, c)])
    for ed in new_edges:
        g.add_edge(ed)
    g.stats["branch"] += 1
    return Kn
