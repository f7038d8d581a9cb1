"""Heuristic steps: fix the config of a node and remove it (TensorOpt Eq. 7), or keep only
its best configs (the work cap).

After fixing ``o_i`` to config ``k*``, every neighbour ``o_j`` absorbs the edge:
``F(o_j, p) <- F(o_j, p) x F(e_ij, k*, p)``, and the first neighbour also absorbs
``F(o_i, k*)``. The step is inexact: strategies with another config of ``o_i`` are lost,
but every remaining point is still an achievable strategy.

A step whose estimated work exceeds the run's cap (``track(max_step_work=...)``) is made
affordable by :func:`shrink_costly`: the node keeps only its best configs
(:func:`rank_configs`), as many as fit the cap, and is then eliminated exactly on them; only
when fewer than a tenth of its configs would fit is its config fixed as above. Either way
strategies are lost (those with a dropped config) and every remaining point stays achievable.

Heuristics for ``k*`` (:func:`choose_config`):

* ``"min_memory"``: the config whose own frontier has the smallest memory (ties: smaller
  time at that point, then smaller index), among the configs with an allowed edge cell towards
  every neighbour where there are such configs (another is in no strategy);
* ``"weighted"``: the config minimising ``m / M + t / T`` summed over the node and, for
  every incident edge, the cheapest edge cell towards the neighbour; ``M`` and ``T`` are
  the mean minimum memory/time of those terms, so both objectives weigh the same.
"""

from __future__ import annotations

import numpy as np

from .elements import WEdge
from .node_elimination import elimination_work
from .table import digest_arrays

__all__ = ["fix_node", "shrink_costly", "choose_config", "rank_configs", "restrict_node", "HEURISTICS",
           "MIN_KEPT_SHARE"]


def _finite_mean(x):
    """Mean of the finite entries (forbidden configs are +inf); 0 when there are none."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else 0.0

HEURISTICS = ("min_memory", "weighted")
MIN_KEPT_SHARE = 0.1
"""A step over the work cap keeps the configs that fit when they are at least this share of
the node's; with fewer, restricting would pay the whole cap for little choice, and the
config is fixed instead (nearly free)."""


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


def _cell_least(tab, value):
    """Per cell of ``tab``: the least of ``value`` (one entry per point); +inf for empty cells."""
    starts = tab.offsets[:-1]
    nonempty = tab.offsets[1:] > starts
    out = np.full(starts.shape[0], np.inf)
    if nonempty.any():
        out[nonempty] = np.minimum.reduceat(value, starts[nonempty])
    return out


def _best_towards(e, i, per_cell):
    """Per config of node ``i``: the least of ``per_cell`` (one entry per cell of edge ``e``)
    over the cells towards any config of the neighbour."""
    imap, wmap, si, sw, _ = e.view(i)
    cells = np.arange(int(imap.max()) + 1)[:, None] * si + np.unique(wmap)[None, :] * sw
    return per_cell[cells].min(axis=1)[imap]


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
    edges = [e for _, e in sorted(g.adj[i].items())]
    if heuristic == "min_memory":
        # among the configs with an allowed cell towards every neighbour where there is one: a
        # config whose edge is forbidden towards every config of a neighbour is in no strategy
        allowed = np.isfinite(mem) & np.isfinite(tim)
        for e in edges:
            allowed &= np.isfinite(_best_towards(e, i, _cell_least(e.table, e.table.mem + e.table.time)))
        if allowed.any():
            mem = np.where(allowed, mem, np.inf)
        return int(np.lexsort((ks, tim, mem))[0])
    # weighted: scales from the node and its edges
    ms = [_finite_mean(mem)]
    ts = [_finite_mean(tim)]
    for e in edges:
        imap, wmap, si, sw, _ = e.view(i)
        em, et = _cell_first(e.table)
        ms.append(_finite_mean(em[np.unique(imap)[:, None] * si + np.unique(wmap)[None, :] * sw]))
        ts.append(_finite_mean(_cell_last_time(e.table)))
    Ms = max(float(np.sum(ms)), 1e-300)
    Ts = max(float(np.sum(ts)), 1e-300)
    score = np.zeros(node.K)
    for tab, cells in node.factors:
        score += _cell_least(tab, tab.mem / Ms + tab.time / Ts)[cells]
    for e in edges:  # best edge cell towards any neighbour config, per config of i
        score += _best_towards(e, i, _cell_least(e.table, e.table.mem / Ms + e.table.time / Ts))
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


def _weighted(tab, lam):
    """``time + lam * memory`` of every point of ``tab`` (``lam = inf``: memory; ``lam = 0``:
    time, as 0 * inf would be nan for a forbidden point)."""
    if np.isinf(lam):
        return tab.mem
    return tab.time + lam * tab.mem if lam > 0 else tab.time


_RANK_WEIGHTS = 9  # weights of memory, spread over four decades around the tables' own ratio


def rank_configs(g, i):
    """The configs of node ``i``, best first.

    For each weight ``lam`` of memory (none, a range around the ratio of the node's and its
    edges' mean time to mean memory, and memory alone), a config is scored by the least
    ``time + lam * memory`` it brings: that of its own frontier plus, for every incident edge,
    that of its cheapest cell towards the neighbour (a lower bound of its share of any
    strategy's cost). Two orders follow: by the best place over the weights (ties: the sum of
    the places), and by Pareto layer of (least memory, least time) (the non-dominated configs
    first, then the non-dominated ones of the rest, ...; within a layer from both ends
    inwards). A config ranks by its better place in the two (ties: the worse one), so that a
    cut keeps the best configs of every part of the trade-off, the configs of the
    non-convex parts too (which no weight favours). A node of the same content as one ranked
    before (the same tables, cells and maps, as repeated layers give) gets its ranking from
    ``g.rank_cache``.

    Examples
    --------
    >>> from tensoropt_py.elimination.table import Context
    >>> from tensoropt_py.elimination.working_graph import WGraph
    >>> ctx = Context()
    >>> g = WGraph(ctx)
    >>> costs = np.array([[3.0, 1.0], [1.0, 3.0], [2.0, 2.0], [3.0, 3.0]])  # (memory, time)
    >>> g.add_node(0, 4, [(ctx.node_leaf(0, costs), np.arange(4))])
    >>> rank_configs(g, 0).tolist()  # config 3 is dominated: last
    [0, 1, 2, 3]
    """
    node = g.nodes[i]
    K = node.K
    edges = list(g.adj[i].values())
    tables = node.tables() + [e.table for e in edges]
    views = [e.view(i)[:4] for e in edges]
    key = b"".join([t.digest() for t in tables]
                   + [digest_arrays(*node.cells(np.arange(K)), *(np.array(v[2:]) for v in views),
                                    *(a for v in views for a in v[:2]))])
    hit = g.rank_cache.get(key)
    if hit is not None:
        return hit.copy()
    mean_mem = sum(_finite_mean(t.mem) for t in tables)
    mean_time = sum(_finite_mean(t.time) for t in tables)
    scale = mean_time / mean_mem if mean_mem > 0 and mean_time > 0 else 1.0
    lams = [0.0, *(scale * np.geomspace(1e-2, 1e2, _RANK_WEIGHTS)), np.inf]
    scores = np.zeros((len(lams), K))
    for r, lam in enumerate(lams):
        for tab, cells in node.factors:
            scores[r] += _cell_least(tab, _weighted(tab, lam))[cells]
        for e in edges:
            scores[r] += _best_towards(e, i, _cell_least(e.table, _weighted(e.table, lam)))
    places = np.empty((len(lams), K), dtype=np.int64)
    for r in range(len(lams)):
        places[r, np.lexsort((np.arange(K), scores[r]))] = np.arange(K)
    by_weight = _places(np.lexsort((np.arange(K), places.sum(axis=0), places.min(axis=0))))
    by_layer = _places(_layer_order(scores[-1], scores[0]))  # lam = inf: memory; lam = 0: time
    order = np.lexsort((np.arange(K), np.maximum(by_weight, by_layer), np.minimum(by_weight, by_layer)))
    g.rank_cache[key] = order
    return order.copy()


def _places(order):
    """The place of every item in ``order``."""
    place = np.empty(order.size, dtype=np.int64)
    place[order] = np.arange(order.size)
    return place


def _layer_order(mem, tim):
    """Items by Pareto layer of ``(mem, tim)``, within a layer from both ends inwards (least
    memory, least time, second least memory, ...)."""
    K = mem.size
    layer = np.empty(K, dtype=np.int64)
    spread = np.empty(K, dtype=np.int64)
    left = np.lexsort((np.arange(K), tim, mem))
    depth = 0
    while left.size:
        best = np.minimum.accumulate(tim[left])
        front = np.ones(left.size, dtype=bool)
        front[1:] = tim[left[1:]] < best[:-1]
        members = left[front]
        layer[members] = depth
        pos = np.arange(members.size)
        spread[members] = np.minimum(2 * pos, 2 * (members.size - 1 - pos) + 1)
        left = left[~front]
        depth += 1
    return np.lexsort((np.arange(K), spread, layer))


def restrict_node(g, i, keep):
    """Keep only configs ``keep`` (indices among node ``i``'s current configs) of node ``i``.

    The node's factors and its edges' maps are re-indexed, not copied: provenance still
    reaches the original leaves, so unroll gives original config numbers. Edges are
    replaced, not changed in place (a snapshot of the graph may share them)."""
    keep = np.sort(np.asarray(keep, dtype=np.int64))
    node = g.nodes[i]
    node.factors = [(tab, cells[keep]) for tab, cells in node.factors]
    node.K = int(keep.size)
    for w, e in list(g.adj[i].items()):
        umap, vmap = (e.umap[keep], e.vmap) if e.u == i else (e.umap, e.vmap[keep])
        g.adj[i][w] = g.adj[w][i] = WEdge(e.u, e.v, umap, vmap, e.table, e.B)
        g.touched.add(w)
    g.touched.add(i)


def shrink_costly(g, i, heuristic, max_step_work, before_fix=None):
    """Make the elimination (or fold) of node ``i`` fit ``max_step_work`` estimated pair sums.

    Node ``i`` keeps its best configs (:func:`rank_configs`), as many as the estimate allows,
    while that is at least ``MIN_KEPT_SHARE`` of them; the caller then eliminates it exactly
    (returns False). Otherwise its config is fixed by ``heuristic`` (:func:`fix_node`, after
    ``before_fix()`` if given) and the node is gone (returns True). Either step is counted as
    heuristic, in ``g.stats["work_capped"]``, and a restriction also in ``g.stats["work_restricted"]``."""
    g.stats["work_capped"] = g.stats.get("work_capped", 0) + 1
    K0 = g.nodes[i].K
    work = elimination_work(g, i)
    while work > max_step_work:
        K = g.nodes[i].K
        k = min(K - 1, int(K * max_step_work / work))
        if k < max(2, MIN_KEPT_SHARE * K0):
            break
        restrict_node(g, i, rank_configs(g, i)[:k])
        work = elimination_work(g, i)
    else:
        g.stats["heuristic"] += 1
        g.stats["work_restricted"] = g.stats.get("work_restricted", 0) + 1
        return False
    if before_fix is not None:
        before_fix()
    fix_node(g, i, choose_config(g, i, heuristic))
    return True
