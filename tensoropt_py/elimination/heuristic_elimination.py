"""Heuristic elimination (TensorOpt Eq. 7): fix the config of a node and remove it.

After fixing ``o_i`` to config ``k*``, every neighbour ``o_j`` absorbs the edge:
``F(o_j, p) <- F(o_j, p) x F(e_ij, k*, p)``, and the first neighbour also absorbs
``F(o_i, k*)``. This is the only inexact step: strategies with another config of ``o_i``
are lost, but every remaining point is still an achievable strategy.

Heuristics for ``k*`` (:func:`choose_config`):

* ``"min_memory"``: the config whose own frontier has the smallest memory (ties: smaller
  time at that point, then smaller index);
* ``"weighted"``: the config minimising ``m / M + t / T`` summed over the node and, for
  every incident edge, the cheapest edge cell towards the neighbour; ``M`` and ``T`` are
  the mean minimum memory/time of those terms, so both objectives weigh the same.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fix_node", "fix_costly", "choose_config", "HEURISTICS"]


def _finite_mean(x):
    """Mean of the finite entries (forbidden configs are +inf); 0 when there are none."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else 0.0

HEURISTICS = ("min_memory", "weighted")


def _cell_first(tab):
    """Per cell: memory and time of the min-memory point (first point); +inf for empty cells."""
    starts = tab.offsets[:-1]
    nonempty = tab.offsets[1:] > starts
    m = np.full(starts.shape[0], np.inf)
    t = np.full(starts.shape[0], np.inf)
    m[nonempty] = tab.mem[starts[nonempty]]
    t[nonempty] = tab.time[starts[nonempty]]
    return m, t


def _cell_last_time(tab):
    ends = tab.offsets[1:]
    nonempty = ends > tab.offsets[:-1]
    return tab.time[ends[nonempty] - 1]


def _cell_min_score(tab, ms, ts):
    """Per cell: min over its points of ``m/ms + t/ts``; +inf for empty cells."""
    starts = tab.offsets[:-1]
    nonempty = tab.offsets[1:] > starts
    out = np.full(starts.shape[0], np.inf)
    if nonempty.any():
        score = tab.mem / ms + tab.time / ts
        out[nonempty] = np.minimum.reduceat(score, starts[nonempty])
    return out


def choose_config(g, i, heuristic):
    """The config index that heuristic elimination fixes for node ``i``."""
    node = g.nodes[i]
    ks = np.arange(node.K)
    mem = np.zeros(node.K)
    tim = np.zeros(node.K)
    for tab, cells in node.factors:
        m0, t0 = _cell_first(tab)
        mem += m0[cells]
        tim += t0[cells]
    if heuristic == "min_memory":
        return int(np.lexsort((ks, tim, mem))[0])
    # weighted: scales from the node and its edges
    ms = [_finite_mean(mem)]
    ts = [_finite_mean(tim)]
    edge_views = []
    for w, e in sorted(g.adj[i].items()):
        imap, wmap, si, sw, _ = e.view(i)
        em, et = _cell_first(e.table)
        ms.append(_finite_mean(em[np.unique(imap)[:, None] * si + np.unique(wmap)[None, :] * sw]))
        ts.append(_finite_mean(_cell_last_time(e.table)))
        edge_views.append((imap, wmap, si, sw, e.table))
    Ms = max(float(np.sum(ms)), 1e-300)
    Ts = max(float(np.sum(ts)), 1e-300)
    score = np.zeros(node.K)
    for tab, cells in node.factors:
        score += _cell_min_score(tab, Ms, Ts)[cells]
    for imap, wmap, si, sw, tab in edge_views:
        cs = _cell_min_score(tab, Ms, Ts)
        wcls = np.unique(wmap)
        # best edge cell towards any neighbour config, per config of i
        score += cs[imap[:, None] * si + wcls[None, :] * sw].min(axis=1)
    return int(np.lexsort((ks, score))[0])


def fix_node(g, i, k):
    """Heuristic elimination of node ``i`` with its config fixed to ``k`` (Eq. 7)."""
    ni = g.nodes[i]
    nbrs = sorted(g.adj[i].items())
    if not nbrs:
        tab = g.ctx.combine(ni.tables(), np.array([0, 1]), np.array([[c[k] for c in ni.cells(np.arange(ni.K))]]))
        g.release_node(ni)
        g.remove_node(i)
        g.detached.append(tab)
        g.stats["heuristic"] += 1
        return
    icells = [int(c[k]) for c in ni.cells(np.arange(ni.K))]
    for idx, (w, e) in enumerate(nbrs):
        nw = g.nodes[w]
        imap, wmap, si, sw, _ = e.view(i)
        parents = nw.tables() + [e.table] + (ni.tables() if idx == 0 else [])
        wcells = nw.cells(np.arange(nw.K))

        def make_terms(lo, hi, wcells=wcells, imap=imap, wmap=wmap, si=si, sw=sw, first=(idx == 0)):
            p = np.arange(lo, hi)
            cols = [c[lo:hi] for c in wcells] + [imap[k] * si + wmap[p] * sw]
            if first:
                cols += [np.full(hi - lo, c, dtype=np.int64) for c in icells]
            return np.stack(cols, axis=1)

        T = g.ctx.combine_gen(parents, nw.K, 1, make_terms)
        g.release_node(nw)
        nw.factors = [(T, np.arange(nw.K))]
        e.table.release()
    g.release_node(ni)
    g.remove_node(i)
    g.stats["heuristic"] += 1


def fix_costly(g, i, heuristic):
    """Heuristic elimination of node ``i`` in place of a node elimination or fold that would
    cost more than the run allows (``track(max_step_work=...)``); counted as heuristic and
    in ``g.stats["work_capped"]``."""
    fix_node(g, i, choose_config(g, i, heuristic))
    g.stats["work_capped"] = g.stats.get("work_capped", 0) + 1
