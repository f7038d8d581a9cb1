"""Exact config screening: drop the configs that no frontier point needs, proven by bounds.

A frontier point (m, t) whose strategy uses config ``k`` of node ``i`` satisfies, for every
``lam >= 0``, ``t + lam * m >= MM_lam(i, k)``, the least ``time + lam * memory`` of any
strategy with ``i = k`` (and ``m >= MM_inf(i, k)``). :func:`relaxation_bounds` computes lower
bounds ``LB <= MM`` for all nodes, configs and a grid of ``lam`` at once, on a spanning-forest
relaxation of the cost graph: the edges that close cycles are replaced by their minimum
over the other endpoint's configs (a valid lower bound), and the forest is solved exactly by
two-pass min-sum message passing.

Given achievable points ``S`` (any strategies' costs), config ``k`` of node ``i`` is
*screened out* when no strategy using it can land outside the region ``S`` weakly dominates
(:func:`screen_out`): the non-dominated region of a staircase ``S`` is a union of open boxes
``{m < c_m, t < c_t}`` at its corners, and the region allowed by the bounds misses such a box
exactly when ``max_lam (LB_lam - lam * c_m) >= c_t`` or ``LB_inf >= c_m``. Every strategy
using a screened-out config is then weakly dominated by a point of ``S``, so the frontier of
the screened graph united with ``S`` is exactly the frontier of the whole graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..elimination.table import table_key
from ..errors import InfeasibleError, InvalidInputError, MemoryLimitError
from ..units import parse_count, parse_positive
from .algebra import frontier_indices
from .cost_graph import CostGraph, LayoutEdge, content_digest
from .scalar import _min_sum_within

__all__ = ["RelaxationBounds", "relaxation_bounds", "screen_out", "restrict", "lam_grid", "improving_moves",
           "lower_bounds", "window_bound"]

_REL_TOL = 1e-9  # bounds and evaluated costs are summed in different orders


@dataclass(frozen=True, slots=True, eq=False)
class RelaxationBounds:
    """Lower bounds of ``time + lam * memory`` (and of memory) per node config.

    Attributes
    ----------
    lams : ndarray, shape (L,)
        The finite weights, ``lams[0] == 0``.
    bounds : tuple of ndarray, shape (L + 1, K_i) each
        Row ``l < L``: a lower bound of ``time + lams[l] * memory`` over the strategies using
        that config; row ``L``: a lower bound of their memory.
    tree_edges : ndarray of bool, shape (n_edges,)
        The edges solved exactly (the others were relaxed to their per-config minimum).
    """

    lams: np.ndarray
    bounds: tuple
    tree_edges: np.ndarray


def lam_grid(cg, n=24):
    """``0`` and ``n - 1`` weights spread geometrically over the exchange rates of ``cg``.

    The rates (seconds per byte) are taken from the spread of every node's time and memory
    (``1e-3 .. 1e3`` times the median ratio), which brackets the slopes of its frontier.

    Parameters
    ----------
    cg : CostGraph
    n : int
        Number of weights (``0`` included).

    Examples
    --------
    >>> import numpy as np
    >>> cg = CostGraph([np.array([[1.0, 4.0], [4.0, 1.0]])], [])
    >>> g = lam_grid(cg, 5)
    >>> float(g[0]), len(g)
    (0.0, 5)
    """
    ratios = []
    for c in cg.node_costs:
        f = np.isfinite(c).all(axis=1)
        if f.sum() < 2:
            continue
        dm = np.ptp(c[f, 0])
        dt = np.ptp(c[f, 1])
        if dm > 0 and dt > 0:
            ratios.append(dt / dm)
    mid = float(np.median(ratios)) if ratios else 1.0
    return np.concatenate([[0.0], np.geomspace(mid * 1e-3, mid * 1e3, n - 1)])


def _weigh(mem, tim, lams):
    """``(L + 1, ...)``: ``tim + lam * mem`` per finite lam, then ``mem``; +inf where forbidden."""
    bad = ~(np.isfinite(mem) & np.isfinite(tim))
    m = np.where(bad, 0.0, mem)
    t = np.where(bad, 0.0, tim)
    out = np.concatenate([t[None] + lams.reshape((-1,) + (1,) * t.ndim) * m[None], m[None]])
    out[:, bad] = np.inf
    return out


def _class_min(h, cls, n_cls):
    """``out[:, c] = min over k with cls[k] == c of h[:, k]`` (every class is non-empty)."""
    if cls.shape[0] == n_cls and np.array_equal(cls, np.arange(n_cls)):
        return h
    order = np.argsort(cls, kind="stable")
    starts = np.searchsorted(cls[order], np.arange(n_cls))
    return np.minimum.reduceat(h[:, order], starts, axis=1)


def _edge_rows(tab, ua, ub, lams):
    """The rows of :func:`_weigh` for an edge table restricted to the classes in use, each
    at its best option: ``(A', B')`` arrays, one weight at a time."""
    sub = tab[np.ix_(ua, ub)]
    for row in range(lams.size + 1):
        yield _weigh(sub[..., 0], sub[..., 1], lams[row:row + 1] if row < lams.size else lams[:0])[0].min(axis=2)


def _classes_key(tab, ua, ub):
    """Key of an edge's cost table restricted to the layout classes ``ua`` x ``ub`` in use: edges
    of repeated layers share it (the cost builder shares their tables)."""
    return table_key(tab), ua.tobytes(), ub.tobytes()


class _RowCache:
    """:func:`_edge_rows` of the edges that share a cost table and its classes in use (model
    layers repeat: the cost builder shares their tables), computed once while they fit in
    ``max_bytes`` (least recently used rows are dropped first; an edge's rows larger than
    that are not kept)."""

    def __init__(self, lams, max_bytes):
        self.lams = lams
        self.max_bytes = max_bytes
        self._rows = {}
        self._bytes = 0

    def rows(self, tab, ua, ub):
        key = _classes_key(tab, ua, ub)
        hit = self._rows.pop(key, None)
        if hit is None:
            hit = list(_edge_rows(tab, ua, ub, self.lams))
            nbytes = sum(w.nbytes for w in hit)
            if nbytes > self.max_bytes:
                return hit  # too large to keep
            self._bytes += nbytes
        self._rows[key] = hit  # most recent last
        while self._bytes > self.max_bytes and len(self._rows) > 1:
            old = self._rows.pop(next(iter(self._rows)))
            self._bytes -= sum(w.nbytes for w in old)
        return hit


_ROW_CACHE_BYTES = 1 << 28  # rows kept for edges that share a table (at most a quarter of max_bytes)


def relaxation_bounds(cg, lams, max_bytes=None):
    """Lower bounds of every strategy's weighted cost with one node's config fixed.

    Parameters
    ----------
    cg : CostGraph
    lams : array_like of float
        Finite weights of memory (seconds per byte), ``lams[0]`` must be 0.
    max_bytes : int or None
        Refuse (:class:`~tensoropt_py.errors.MemoryLimitError`) an edge whose cost rows
        would need more memory than this (None: no limit).

    Returns
    -------
    RelaxationBounds

    Examples
    --------
    >>> import numpy as np
    >>> nodes = [np.array([[1.0, 4.0], [4.0, 1.0]])] * 2
    >>> rb = relaxation_bounds(CostGraph(nodes, [(0, 1, np.zeros((2, 2, 2)))]), [0.0, 1.0])
    >>> rb.bounds[0].tolist()  # time, time + memory, memory with node 0 in config 0 / 1
    [[5.0, 2.0], [10.0, 10.0], [2.0, 5.0]]
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    lams = np.asarray(lams, dtype=np.float64).reshape(-1)
    if lams.size == 0 or lams[0] != 0 or not np.all(np.isfinite(lams)) or (lams < 0).any():
        raise InvalidInputError(f"lams must be finite weights >= 0 starting with 0, got {lams.tolist()}")
    n = cg.n_nodes
    unary = [_weigh(c[:, 0], c[:, 1], lams) for c in cg.node_costs]
    cache = _RowCache(lams, _ROW_CACHE_BYTES if max_bytes is None else min(_ROW_CACHE_BYTES, max_bytes // 4))
    classes = []  # per edge: the classes in use at each end and every config's index among them
    coupling = np.zeros(cg.n_edges)
    coupled = {}  # coupling by table and classes in use: repeated layers' edges share both
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        ua, sm = np.unique(smap, return_inverse=True)
        ub, dm = np.unique(dmap, return_inverse=True)
        need = 8 * ua.size * ub.size * (4 * tab.shape[2] + lams.size + 1)  # its costs, temporaries and weighted rows
        if max_bytes is not None and need > max_bytes:
            raise MemoryLimitError(
                f"relaxation bounds: edge {e} ({u}->{v}) has {ua.size} x {ub.size} layout classes in use and "
                f"needs {need / 2**20:.1f} MiB, more than max_bytes = {max_bytes / 2**20:.1f} MiB",
                used_bytes=int(need), limit_bytes=int(max_bytes))
        classes.append((ua, ub, sm.reshape(-1), dm.reshape(-1)))
        key = _classes_key(tab, ua, ub)
        if key not in coupled:
            x = cache.rows(tab, ua, ub)[lams.size // 2]
            fin = np.isfinite(x)
            if fin.any():
                x = np.where(fin, x, 2.0 * float(np.abs(x[fin]).max()) + 1.0)
                coupled[key] = float((x - x.min(axis=1, keepdims=True)).mean()
                                     + (x - x.min(axis=0, keepdims=True)).mean())
            else:
                coupled[key] = np.inf
        coupling[e] = coupled[key]
    # maximum spanning forest by coupling: the strongest edges are kept exact
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    tree = np.zeros(cg.n_edges, dtype=bool)
    for e in np.argsort(-coupling, kind="stable"):
        u, v = cg._norm[e][0], cg._norm[e][1]
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[ru] = rv
            tree[e] = True
    adj = [[] for _ in range(n)]
    for e, (u, v, *_rest) in enumerate(cg._norm):
        if tree[e]:
            adj[u].append((v, e))
            adj[v].append((u, e))
        else:  # relaxed: its least cost for each config of u, whatever v does
            ua, ub, sm, dm = classes[e]
            rows = np.stack([w.min(axis=1) for w in cache.rows(cg._norm[e][4], ua, ub)])
            unary[u] = unary[u] + rows[:, sm]

    def message(e, src, h):
        """Min over ``src``'s configs of ``h`` plus edge ``e``, for each config of the other end."""
        ua, ub, sm, dm = classes[e]
        rows = cache.rows(cg._norm[e][4], ua, ub)
        if cg._norm[e][0] == src:
            hc = _class_min(h, sm, ua.size)
            return np.stack([(w + hc[r][:, None]).min(axis=0) for r, w in enumerate(rows)])[:, dm]
        hc = _class_min(h, dm, ub.size)
        return np.stack([(w + hc[r][None, :]).min(axis=1) for r, w in enumerate(rows)])[:, sm]

    bounds = [None] * n
    seen = np.zeros(n, dtype=bool)
    consts = []
    comp_of = np.zeros(n, dtype=np.int64)
    for root in range(n):
        if seen[root]:
            continue
        order, par, pe = [root], {root: -1}, {root: -1}
        seen[root] = True
        for x in order:  # breadth-first
            for y, e in adj[x]:
                if not seen[y]:
                    seen[y] = True
                    par[y], pe[y] = x, e
                    order.append(y)
        up = {}
        inner = {}
        for x in reversed(order):
            h = unary[x].copy()
            for y, e in adj[x]:
                if par.get(y) == x:
                    h = h + up[y]
            inner[x] = h
            if par[x] >= 0:
                up[x] = message(pe[x], x, h)
        down = {root: np.zeros_like(unary[root])}
        for x in order:
            kids = [y for y, e in adj[x] if par.get(y) == x]
            for y in kids:
                h = unary[x] + down[x]
                for z in kids:
                    if z != y:
                        h = h + up[z]
                down[y] = message(pe[y], x, h)
            bounds[x] = inner[x] + down[x]
        consts.append(bounds[root].min(axis=1))
        comp_of[order] = len(consts) - 1
    total = np.sum(consts, axis=0)
    out = []
    for x in range(n):
        with np.errstate(invalid="ignore"):  # inf - inf in an infeasible component stays inf below
            b = bounds[x] + (total - consts[comp_of[x]])[:, None]
        out.append(np.where(np.isnan(b), np.inf, b))
    return RelaxationBounds(lams=lams, bounds=tuple(out), tree_edges=tree)


def screen_out(rb, memory, time, max_corners=256):
    """Per node, the configs no strategy outside the region dominated by ``(memory, time)`` uses.

    Parameters
    ----------
    rb : RelaxationBounds
    memory, time : array_like of float
        Costs of achievable strategies (any set; dominated points are ignored).
    max_corners : int
        The staircase is thinned to about this many points first (a subset of the points
        dominates less, so screening stays exact, only weaker).

    Returns
    -------
    list of ndarray of bool
        ``True`` where the config can be dropped. Bounds are compared with a relative
        tolerance of 1e-9 in the safe direction, so a config whose best strategy is one of
        the given points is kept.

    Examples
    --------
    >>> import numpy as np
    >>> cg = CostGraph([np.array([[1.0, 4.0], [4.0, 1.0], [5.0, 5.0]])], [])
    >>> rb = relaxation_bounds(cg, lam_grid(cg, 4))
    >>> screen_out(rb, [1.0, 4.0], [4.0, 1.0])[0].tolist()  # only config 2 is dominated
    [False, False, True]
    """
    mem = np.asarray(memory, dtype=np.float64)
    tim = np.asarray(time, dtype=np.float64)
    keep = frontier_indices(mem, tim)
    mem, tim = mem[keep], tim[keep]
    if mem.size == 0:
        return [np.zeros(b.shape[1], dtype=bool) for b in rb.bounds]
    if mem.size > max_corners:  # keep both ends
        pick = np.unique(np.round(np.linspace(0, mem.size - 1, max_corners)).astype(np.int64))
        mem, tim = mem[pick], tim[pick]
    L = rb.lams.size
    cm = mem[1:] * (1 - _REL_TOL)  # box {m < cm, t < ct} at each inner corner
    ct = tim[:-1] * (1 + _REL_TOL)
    out = []
    for b in rb.bounds:
        ok = b[0] >= tim[-1] * (1 + _REL_TOL)  # nothing faster than the fastest point
        ok &= b[L] >= mem[0] * (1 + _REL_TOL)  # nothing smaller than the smallest
        if cm.size:
            alive = np.nonzero(ok)[0]
            if alive.size:
                bb = b[:L, alive]  # (L, k)
                slack = (bb[:, :, None] - rb.lams[:, None, None] * cm[None, None, :]).max(axis=0) >= ct[None, :]
                slack |= b[L, alive][:, None] >= cm[None, :]
                ok[alive] = slack.all(axis=1)
        out.append(ok)
    return out


def restrict(cg, keep):
    """The CostGraph of ``cg`` with node ``i`` limited to the configs ``keep[i]`` (indices).

    Edges become :class:`LayoutEdge` over the layout classes still in use (a compacted copy
    of the table, shared by the edges that shared the table).

    Parameters
    ----------
    cg : CostGraph
    keep : sequence of array_like of int
        Per node, the config indices kept (in the order they get in the result).

    Examples
    --------
    >>> import numpy as np
    >>> cg = CostGraph([np.array([[1.0, 4.0], [4.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    >>> restrict(cg, [np.array([1]), np.array([0, 1])]).n_configs
    (1, 2)
    """
    nodes = [cg.node_costs[i][k] for i, k in enumerate(keep)]
    edges = []
    shared = {}  # edges sharing a table and the classes in use share the compacted table
    for (u, v, smap, dmap, tab) in cg._norm:
        ua, sm = np.unique(smap[keep[u]], return_inverse=True)
        ub, dm = np.unique(dmap[keep[v]], return_inverse=True)
        key = _classes_key(tab, ua, ub)
        small = shared.get(key)
        if small is None:
            small = shared[key] = np.ascontiguousarray(tab[ua][:, ub])
            small.flags.writeable = False  # so that its LayoutEdges keep it, not a copy each
        edges.append((u, v, LayoutEdge(sm.reshape(-1), dm.reshape(-1), small)))
    return CostGraph(nodes, edges)


def top_configs(rb, per_weight):
    """Per node, the indices of the ``per_weight`` configs of least bound for each weight.

    Parameters
    ----------
    rb : RelaxationBounds
    per_weight : int
        Configs taken per bound row (the weights and memory).

    Examples
    --------
    >>> import numpy as np
    >>> cg = CostGraph([np.array([[1.0, 4.0], [4.0, 1.0], [5.0, 5.0]])], [])
    >>> top_configs(relaxation_bounds(cg, [0.0]), 1)[0].tolist()  # fastest, smallest
    [0, 1]
    """
    keep = []
    for b in rb.bounds:
        r = min(per_weight, b.shape[1])
        idx = np.argpartition(b, r - 1, axis=1)[:, :r] if r < b.shape[1] else np.broadcast_to(np.arange(r), (b.shape[0], r))
        ks = np.unique(idx[np.isfinite(np.take_along_axis(b, idx, axis=1))])
        keep.append(ks if ks.size else np.array([int(np.argmin(b[0]))]))
    return keep


def improving_moves(cg, choices, edge_choices, memory, time, front_memory, front_time):
    """Per node, the configs that improve on a frontier by a one-node move.

    For every given strategy (rows of ``choices``) and every node, each other config of the
    node is tried with the rest fixed (the incident edges take their fastest finite option);
    a config is returned when some such move lands outside the region the frontier dominates.

    Parameters
    ----------
    cg : CostGraph
    choices, edge_choices : ndarray of int, shape (P, n_nodes) and (P, n_edges)
        The strategies to move from.
    memory, time : ndarray, shape (P,)
        Their costs.
    front_memory, front_time : ndarray
        The frontier to improve on.

    Returns
    -------
    list of ndarray of int

    Examples
    --------
    >>> import numpy as np
    >>> cg = CostGraph([np.array([[2.0, 2.0], [1.0, 1.0]])], [])
    >>> m, t = np.array([2.0]), np.array([2.0])
    >>> improving_moves(cg, np.array([[0]]), np.zeros((1, 0), dtype=int), m, t, m, t)[0].tolist()
    [1]
    """
    order = np.argsort(front_memory, kind="stable")
    fm, ft = front_memory[order], np.minimum.accumulate(front_time[order])
    choices = np.asarray(choices)
    inc = [[] for _ in range(cg.n_nodes)]
    for e, (u, v, *_r) in enumerate(cg._norm):
        inc[u].append(e)
        inc[v].append(e)
    fastest = {}  # per cost table (edges share them): its fastest option's costs, (A, B, 2)
    for *_r, tab in cg._norm:
        if id(tab) not in fastest:
            best = tab[..., 1].argmin(axis=2)  # absent options are +inf
            fastest[id(tab)] = np.take_along_axis(tab, best[..., None, None], axis=2)[:, :, 0, :]
    out = []
    for i, c in enumerate(cg.node_costs):
        ci = choices[:, i]
        dm = c[None, :, 0] - c[ci, 0][:, None]  # (P, K)
        dt = c[None, :, 1] - c[ci, 1][:, None]
        for e in inc[i]:
            u, v, smap, dmap, tab = cg._norm[e]
            opt = edge_choices[:, e]
            fast = fastest[id(tab)]
            if u == i:
                old = tab[smap[ci], dmap[choices[:, v]], opt]  # (P, 2)
                new = fast[smap[None, :], dmap[choices[:, v]][:, None]]  # (P, K, 2)
            else:
                old = tab[smap[choices[:, u]], dmap[ci], opt]
                new = fast[smap[choices[:, u]][:, None], dmap[None, :]]
            dm = dm + new[..., 0] - old[:, None, 0]
            dt = dt + new[..., 1] - old[:, None, 1]
        m2 = memory[:, None] + dm
        t2 = time[:, None] + dt
        pos = np.searchsorted(fm, m2 * (1 + _REL_TOL), side="right")  # frontier points with memory <= m2
        bound = np.where(pos > 0, ft[np.maximum(pos - 1, 0)], np.inf)
        with np.errstate(invalid="ignore"):
            better = np.isfinite(t2) & (t2 < bound * (1 - _REL_TOL))
        out.append(np.nonzero(better.any(axis=0))[0])
    return out


def lower_bounds(rb):
    """Lower bounds of the whole graph's optima from :func:`relaxation_bounds`: per row of
    ``rb.bounds`` (each lam of ``rb.lams``, then memory), the largest over nodes of the least
    bound over their configs (every strategy uses some config of every node).

    Parameters
    ----------
    rb : RelaxationBounds

    Returns
    -------
    ndarray, shape (len(rb.lams) + 1,)

    Examples
    --------
    >>> import numpy as np
    >>> nodes = [np.array([[1.0, 4.0], [4.0, 1.0]])] * 2
    >>> rb = relaxation_bounds(CostGraph(nodes, [(0, 1, np.zeros((2, 2, 2)))]), [0.0])
    >>> lower_bounds(rb).tolist()  # least time, least memory
    [2.0, 2.0]
    """
    return np.max([b.min(axis=1) for b in rb.bounds], axis=0)


_WINDOW_BOUND = 20  # nodes per window of window_bound (Llama-8B-shaped: 1 s, tighter than the forest's)


def _weighted(mem, tim, lam):
    """``time + lam * memory`` (memory for lam = inf); +inf where forbidden: the one row of
    :func:`_weigh` for that weight."""
    return _weigh(mem, tim, np.array([] if np.isinf(lam) else [lam]))[0]


_WINDOW_BOUND_ENTRIES = 5_000_000  # max_entries of window_bound's windows (a few such factors are alive at once)


def window_bound(cg, lam, window=_WINDOW_BOUND, max_entries=_WINDOW_BOUND_ENTRIES, max_work=2e8):
    """A lower bound of ``min time + lam * memory`` (memory for lam = inf) from windows of
    consecutive nodes solved exactly.

    The nodes of ``cg.topological_order`` are cut into windows of ``window``; an edge between
    two windows is relaxed to its least weighted cost over the other end's configs (and its
    options), charged to its source; each window, with every edge inside it exact, is solved by
    :func:`~tensoropt_py.engine.min_sum`, and the optima add up to the bound. Cycles inside a
    window stay exact, which the spanning-forest relaxation (:func:`relaxation_bounds`) gives up.

    Parameters
    ----------
    cg : CostGraph
    lam : float
        Weight of memory, ``>= 0``, or inf.
    window : int
        Nodes per window (a window of every node gives the exact optimum).
    max_entries, max_work : int
        :func:`~tensoropt_py.engine.min_sum`'s limits for one window.

    Returns
    -------
    float or None
        The bound; None when a window is too wide for the limits.

    Raises
    ------
    InvalidInputError
        For a bad ``lam``, ``window``, ``max_entries`` or ``max_work``.

    Examples
    --------
    >>> import numpy as np
    >>> switch = np.array([[[0.0, 0.0], [0.0, 5.0]], [[0.0, 5.0], [0.0, 0.0]]])  # time 5 to change layout
    >>> cg = CostGraph([np.array([[1.0, 1.0], [1.0, 2.0]]), np.array([[1.0, 2.0], [1.0, 1.0]])],
    ...                [(0, 1, switch)])
    >>> window_bound(cg, 0.0, window=2), window_bound(cg, 0.0, window=1)  # exact; the edge relaxed
    (3.0, 2.0)
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    lam = float(lam)
    if not lam >= 0:
        raise InvalidInputError(f"lam must be a weight >= 0 (or inf), got {lam!r}")
    parse_count(window, "window")
    parse_count(max_entries, "max_entries")
    parse_positive(max_work, "max_work")
    order = np.asarray(cg.topological_order, dtype=np.int64)
    part = np.empty(cg.n_nodes, dtype=np.int64)
    part[order] = np.arange(cg.n_nodes) // window
    unary = [_weighted(c[:, 0], c[:, 1], lam) for c in cg.node_costs]
    inside = [[] for _ in range(int(part.max()) + 1 if cg.n_nodes else 0)]
    scalar = {}  # per edge cost array: its weighted costs as a (0, weight) table (layers share arrays)
    for u, v, smap, dmap, tab in cg._norm:
        key = table_key(tab)
        if key not in scalar:
            w = _weighted(tab[..., 0], tab[..., 1], lam)  # (A, B, R)
            scalar[key] = np.stack([np.zeros_like(w), w], axis=-1)
            scalar[key].flags.writeable = False  # so that the windows' graphs keep it, not a copy each
        if part[u] == part[v]:
            inside[part[u]].append((u, v, smap, dmap, scalar[key]))
        else:  # relaxed: its least cost for each config of u, whatever v does
            unary[u] = unary[u] + scalar[key][..., 1].min(axis=(1, 2))[smap]
    total = 0.0
    optima, tables = {}, {}  # a window's optimum by its content (repeated layers repeat windows)
    for k, edges in enumerate(inside):
        nodes = order[k * window:(k + 1) * window]
        local = {int(i): j for j, i in enumerate(nodes)}
        costs = [np.stack([np.zeros_like(unary[i]), unary[i]], axis=1) for i in nodes]
        try:
            sub = CostGraph(costs, [(local[u], local[v], LayoutEdge(sm, dm, t)) for u, v, sm, dm, t in edges])
            key = content_digest(sub, tables)
            if key not in optima:
                # its least time only: no smallest of the fastest strategies wanted
                optima[key] = _min_sum_within(sub, 0.0, int(max_entries), int(max_entries), max_work)[0].value
        except InfeasibleError:  # no finite strategy at all: nothing is below +inf
            return float("inf")
        except InvalidInputError:  # too wide for the limits (or a window node with no config left)
            return None
        total += optima[key]
    return total
