"""Node elimination (TensorOpt Eq. 4), exact leaf folding, and detaching finished nodes.

* :func:`eliminate_node`: a node with exactly two neighbours h and j (one edge in, one
  out in the paper) is replaced by an edge h-j whose cell (w, p) is
  ``reduce(union_k F(e_hi, w, k) x F(o_i, k) x F(e_ij, k, p))``.
* :func:`fold_leaf`: a node with a single neighbour j is folded into j exactly:
  ``F(o_j, p) <- F(o_j, p) x reduce(union_k F(o_i, k) x F(e_ij, k, p))``. This is also
  one step of LDP (Alg. 3, line 6), which is how :mod:`tensoropt_py.engine.ldp` uses it.
* :func:`detach`: a node without neighbours becomes a finished one-cell frontier
  ``reduce(union_k F(o_i, k))``.

Layout exploitation: configs that the incident edges cannot tell apart (same layout
classes) are first reduced together once (``group_units``), the combination is done per
layout pair instead of per config pair, and the destination's own cost is added per
config (a lazy factor when the destination has fewer layout classes than configs).
"""

from __future__ import annotations

import numpy as np

from .table import digest_arrays
from .working_graph import WEdge, group_units

__all__ = ["eliminate_node", "eliminate_hub_first", "fold_leaf", "detach", "elimination_work"]


def _sums(n, U, rows, cols):
    """The terms of ``n`` output cells as sums for the kernel, ``(row (S, n), col (S, U))``:
    slot ``s`` of term ``u`` of cell ``c`` takes ``rows[s][c] + cols[s][u]`` (``None``: 0)."""
    row = np.zeros((len(rows), n), dtype=np.int64)
    col = np.zeros((len(cols), U), dtype=np.int64)
    for s, (r, c) in enumerate(zip(rows, cols)):
        if r is not None:
            row[s] = r
        if c is not None:
            col[s] = c
    return row, col


def elimination_work(g, i):
    """Estimated pair sums of eliminating (or folding) node ``i``: its configs times, per
    neighbour, the neighbour's configs and the mean points per cell of the edge to it, times
    the mean points per config of ``i``'s own frontier (a term sums one frontier of each;
    layout classes and the kernel's pruning make the real work smaller)."""
    work = float(g.nodes[i].K)
    for j, e in g.adj[i].items():
        work *= g.nodes[j].K * e.table.n_points / max(e.table.n_cells, 1)
    for tab in g.nodes[i].tables():
        work *= tab.n_points / max(tab.n_cells, 1)
    return work


def detach(g, i):
    """Remove isolated node ``i``; append ``reduce(union_k F(o_i, k))`` to ``g.detached``."""
    node = g.nodes[i]
    assert g.degree(i) == 0
    ks = np.arange(node.K)
    tab = g.ctx.combine(node.tables(), np.array([0, node.K]), np.stack(node.cells(ks), axis=1))
    g.release_node(node)
    g.remove_node(i)
    g.detached.append(tab)
    g.stats["detach"] += 1
    return tab


def _reduce_per_class(g, i):
    """``reduce_k F(o_i, k) x F(e_ij, k, p)`` once per layout class ``p`` of the only
    neighbour ``j`` of node ``i``: ``(j, table, class of each config of j)``. Releases what
    only ``i`` needed and removes ``i``."""
    ((j, e),) = g.adj[i].items()
    ni = g.nodes[i]
    imap, jmap, si, sj, _ = e.view(i)
    utabs, ucols, rep = group_units(g, ni, imap)
    U = rep.shape[0]
    ecell_i = imap[rep] * si  # (U,)
    _, jrep, jinv = np.unique(jmap, return_index=True, return_inverse=True)

    def make_outer(lo, hi):
        return _sums(hi - lo, U, [None] * len(ucols) + [jmap[jrep[lo:hi]] * sj], list(ucols) + [ecell_i])

    H = g.ctx.combine_gen(utabs + [e.table], jrep.shape[0], U, make_outer=make_outer)
    for t in utabs:
        t.release()
    g.release_node(ni)
    e.table.release()
    g.remove_node(i)
    return j, H, jinv.astype(np.int64)


def fold_leaf(g, i):
    """Fold node ``i`` (exactly one neighbour) into that neighbour (exact)."""
    ((j, e),) = g.adj[i].items()
    ni, nj = g.nodes[i], g.nodes[j]
    imap, jmap, si, sj, _ = e.view(i)
    if np.unique(jmap).shape[0] < nj.K:
        # per destination layout class, then a lazy factor on j
        _, H, jinv = _reduce_per_class(g, i)
        nj.factors.append((H, jinv))
        if len(nj.factors) > 2:
            g.materialize(nj)
        g.touched.add(j)
        g.stats["leaf"] += 1
        return
    utabs, ucols, rep = group_units(g, ni, imap)
    U = rep.shape[0]
    ecell_i = imap[rep] * si  # (U,)
    jtabs = nj.tables()
    jcells = nj.cells(np.arange(nj.K))

    def make_outer(lo, hi):
        rows = [None] * len(ucols) + [jmap[lo:hi] * sj] + [c[lo:hi] for c in jcells]
        return _sums(hi - lo, U, rows, list(ucols) + [ecell_i] + [None] * len(jcells))

    T = g.ctx.combine_gen(utabs + [e.table] + jtabs, nj.K, U, make_outer=make_outer)
    g.release_node(nj)
    nj.factors = [(T, np.arange(nj.K))]
    for t in utabs:
        t.release()
    g.release_node(ni)
    e.table.release()
    g.remove_node(i)
    g.touched.add(j)
    g.stats["leaf"] += 1


def eliminate_node(g, i):
    """Eliminate node ``i`` with exactly two neighbours h < j (Eq. 4): new edge h-j."""
    (h, eh), (j, ej) = sorted(g.adj[i].items())
    ni = g.nodes[i]
    ih, hmap, sih, sh, _ = eh.view(i)
    ij, jmap, sij, sj, _ = ej.view(i)
    utabs, ucols, rep = group_units(g, ni, ih, ij)
    U = rep.shape[0]
    _, hrep, hinv = np.unique(hmap, return_index=True, return_inverse=True)
    _, jrep, jinv = np.unique(jmap, return_index=True, return_inverse=True)
    A, D = hrep.shape[0], jrep.shape[0]
    eh_i = ih[rep] * sih
    ej_i = ij[rep] * sij
    base_h = hmap[hrep] * sh  # (A,) cell offsets of the h-side layout classes
    base_j = jmap[jrep] * sj  # (D,)

    def make_outer(lo, hi):
        c = np.arange(lo, hi)
        return _sums(hi - lo, U, [base_h[c // D]] + [None] * len(ucols) + [base_j[c % D]], [eh_i] + list(ucols) + [ej_i])

    # the terms follow from these arrays alone: a repeated layer finds its batches in the memo
    # without building (or hashing) them
    key = digest_arrays(np.array([D, U, len(ucols)]), base_h, eh_i, base_j, ej_i, *ucols)
    T = g.ctx.combine_gen([eh.table] + utabs + [ej.table], A * D, U, terms_key=key, make_outer=make_outer)
    for t in utabs:
        t.release()
    g.release_node(ni)
    eh.table.release()
    ej.table.release()
    g.remove_node(i)
    g.add_edge(WEdge(h, j, hinv, jinv, T, D))
    g.stats["node"] += 1


def eliminate_hub_first(g, i, h):
    """Eliminate node ``i`` (neighbours ``h`` and ``j``) and its neighbour ``h`` (neighbours
    ``i``, ``j`` and one-config nodes ``c``), ``h`` first: the result is an edge ``j-c``.

    Eliminating ``i`` first would build the ``K_h x K_j`` edge ``h-j`` and then reduce it
    over ``h`` with the edges to ``c``; the order here merges the edges to ``c`` (functions
    of ``h`` alone: ``c`` has one config) into the edge ``h-i``, eliminates ``h`` (edge
    ``i-j``) and reduces that over ``i``. Both give ``j-c`` cell ``p`` =
    ``reduce_{k_h, k_i} F(o_h) x F(e_hc) x F(e_hi) x F(e_hj) x F(o_i) x F(e_ij)``; this one
    costs less where ``h``'s edges to ``c`` hold fewer points than ``i``'s edges to ``h``
    and ``j`` (the first layer of a model, whose input node has many configs). Eliminating
    ``h`` then sums one table of many points per cell (``h-i``) with single points where
    ``h-j`` holds one point per cell (a residual connection): the sweep kernel's form.
    """
    (j,) = (y for y in g.adj[i] if y != h)
    carriers = [c for c in g.adj[h] if c not in (i, j)]
    assert carriers and all(g.nodes[c].K == 1 for c in carriers) and j in g.adj[h]
    for c in carriers:
        # a function of h's config alone: an edge h-i with one class on i's side
        e = g.adj[h].pop(c)
        del g.adj[c][h]
        g.touched.add(c)
        hmap, cmap, sh, sc, _ = e.view(h)
        g.add_edge(WEdge(h, i, hmap * sh + cmap[0] * sc, np.zeros(g.nodes[i].K, dtype=np.int64), e.table, 1))
    eliminate_node(g, h)  # the new edge i-j is merged with the old one
    j, H, jinv = _reduce_per_class(g, i)
    g.add_edge(WEdge(j, carriers[0], jinv, np.zeros(1, dtype=np.int64), H, 1))
    g.stats["node"] += 1
    g.stats["hub_first"] += 1
