"""Edge elimination (TensorOpt Eq. 5): merge parallel edges between the same node pair.

``F(e_ij, s_i^k, s_j^p) = product_v F(e^v_ij, s_i^k, s_j^p)``. With factored (layout)
edges the merged edge keeps a factored form: its layout class on each side is the pair
of the two edges' classes, so the merged table has one cell per *used* class pair.
"""

from __future__ import annotations

import numpy as np

from .elements import WEdge

__all__ = ["merge_edges"]


def merge_edges(g, e1, e2):
    """Merge working edge ``e2`` into ``e1`` (same endpoints, any orientation); returns the new edge."""
    u, v = e1.u, e1.v
    m2u, m2v, s2u, s2v, _ = e2.view(u)
    _, urep, uinv = np.unique(e1.umap * (int(m2u.max()) + 1) + m2u, return_index=True, return_inverse=True)
    _, vrep, vinv = np.unique(e1.vmap * (int(m2v.max()) + 1) + m2v, return_index=True, return_inverse=True)
    A, B = urep.shape[0], vrep.shape[0]

    def make_terms(lo, hi):
        c = np.arange(lo, hi)
        ku, kv = urep[c // B], vrep[c % B]
        return np.stack([e1.umap[ku] * e1.B + e1.vmap[kv], m2u[ku] * s2u + m2v[kv] * s2v], axis=1)

    tab = g.ctx.combine_gen([e1.table, e2.table], A * B, 1, make_terms)
    e1.table.release()
    e2.table.release()
    g.stats["edge"] += 1
    return WEdge(u, v, uinv, vinv, tab, B)
