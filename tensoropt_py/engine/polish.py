"""Local search from a strategy: better strategies for one weighted objective where the
exact optimum (:func:`~tensoropt_py.engine.min_sum`) is out of reach.

* :func:`descend`: moves of one node, or of the two ends of one edge, while one improves
  ``time + lam * memory`` (a local optimum for such moves);
* :func:`reoptimize_windows`: windows of consecutive nodes (in the graph's topological
  order) re-solved exactly by :func:`~tensoropt_py.engine.min_sum`, the rest of the
  strategy fixed (a window too wide for it is left as it is).

Both only ever improve the objective, so the result is never worse than the start.
:func:`~tensoropt_py.engine.track` uses them on the ends of a frontier whose exact optima
are out of reach (and :func:`~tensoropt_py.engine.screen.lower_bounds` says how far from
the optimum the result may still be).
"""

from __future__ import annotations

import numpy as np

from ..elimination.table import table_key
from ..errors import InfeasibleError, InvalidInputError
from ..units import parse_count
from .cost_graph import CostGraph, LayoutEdge, content_digest, evaluate
from .scalar import _weigh, min_sum

__all__ = ["descend", "reoptimize_windows"]

_REL_TOL = 1e-9  # costs summed in different orders: a move must gain more than this


def _check(cg, choices, edge_choices, lam):
    """``(choices, edge_choices, lam)`` checked and copied (int64 arrays, float lam)."""
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    lam = float(lam)
    if not lam >= 0:
        raise InvalidInputError(f"lam must be a weight >= 0 (or inf), got {lam!r}")
    ch = np.array(choices, dtype=np.int64).reshape(-1)
    ech = np.array(edge_choices, dtype=np.int64).reshape(-1)
    if ch.shape != (cg.n_nodes,) or ech.shape != (cg.n_edges,):
        raise InvalidInputError(f"choices and edge_choices must have {cg.n_nodes} and {cg.n_edges} entries, "
                                f"got {ch.size} and {ech.size}")
    if ((ch < 0) | (ch >= np.asarray(cg.n_configs))).any():
        raise InvalidInputError("choices must be configs of their nodes (0 <= choice < n_configs)")
    return ch, ech, lam


def _best_options(cg, ch, ech, lam):
    """Set, in place, every edge of ``ech`` whose option is not the best for ``lam`` given its
    ends' configs ``ch`` (or is out of range) to the best one: the edges that share a cost
    table at once."""
    groups = {}  # per cost table: its edges and the classes their ends' configs pick
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        group = groups.setdefault(table_key(tab), (tab, [], [], []))
        group[1].append(e)
        group[2].append(smap[ch[u]])
        group[3].append(dmap[ch[v]])
    for tab, edges, rows, cols in groups.values():
        edges = np.asarray(edges, dtype=np.int64)
        options = tab[np.asarray(rows), np.asarray(cols)]  # (n, R, 2)
        cost = _objective(options[..., 0], options[..., 1], lam)  # (n, R, width)
        best = _argbest(cost, axis=1)
        now = ech[edges]
        change = (now < 0) | (now >= cost.shape[1])
        keep = np.flatnonzero(~change)
        change[keep] = _better_rows(cost[keep, best[keep]], cost[keep, now[keep]])
        ech[edges[change]] = best[change]


_DESCENT_SWEEPS = 20  # sweeps of moves before descend stops (each move strictly improves)


def _objective(mem, tim, lam):
    """Costs in the order :func:`descend` compares them (:func:`~.scalar._weigh`): ``(..., 1)``
    holding ``time + lam * memory``, or for lam = inf ``(..., 2)`` holding (memory, time); the
    first component +inf where forbidden."""
    return _weigh(mem, tim, lam)


def _argbest(cost, axis):
    """Index of the least of costs ``(..., width)`` along ``axis``: the first within
    ``_REL_TOL`` of the least first component, or of those the one of least second component."""
    first = cost[..., 0].min(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        tie = cost[..., 0] <= first + _REL_TOL * np.abs(first)
    if cost.shape[-1] == 1:
        return tie.argmax(axis=axis)
    return np.where(tie, cost[..., 1], np.inf).argmin(axis=axis)


def _better(a, b):
    """Whether cost ``a`` beats ``b`` by more than rounding (first component, then second if
    any; a finite cost beats a forbidden one)."""
    tol = [_REL_TOL * abs(x) if np.isfinite(x) else 0.0 for x in b]
    if a[0] < b[0] - tol[0]:
        return True
    return len(b) > 1 and a[0] <= b[0] + tol[0] and a[1] < b[1] - tol[1]


def _better_rows(a, b):
    """:func:`_better` of cost rows ``a`` and ``b`` (``(n, width)``), row by row."""
    tol = np.where(np.isfinite(b), _REL_TOL * np.abs(b), 0.0)
    out = a[:, 0] < b[:, 0] - tol[:, 0]
    if b.shape[1] > 1:
        out |= (a[:, 0] <= b[:, 0] + tol[:, 0]) & (a[:, 1] < b[:, 1] - tol[:, 1])
    return out


def _at_best_option(rows, lam):
    """:func:`_objective` of edge costs ``(..., R, 2)`` at the best option: ``(..., width)``."""
    cost = _objective(rows[..., 0], rows[..., 1], lam)
    best = _argbest(cost, axis=-1)  # the options' axis, of the costs without their last one
    return np.take_along_axis(cost, best[..., None, None], axis=-2)[..., 0, :]


class _Descent:
    """The state of :func:`descend`: a strategy's configs and the objective of moving nodes."""

    def __init__(self, cg, ch, lam):
        self.cg, self.ch, self.lam = cg, ch, lam
        self.inc = [[] for _ in range(cg.n_nodes)]
        self.nbrs = [set() for _ in range(cg.n_nodes)]
        best = {}  # per edge cost array (layers share theirs): its classes' pairs at their best option
        self.best = []
        self.least = []  # and the least of those (per component): a bound for move_pair
        for e, (u, v, _smap, _dmap, tab) in enumerate(cg._norm):
            self.inc[u].append(e)
            self.inc[v].append(e)
            self.nbrs[u].add(v)
            self.nbrs[v].add(u)
            key = table_key(tab)
            if key not in best:
                at_best = _at_best_option(tab, lam)  # (A, B, width)
                best[key] = at_best, at_best.reshape(-1, at_best.shape[-1]).min(axis=0)
            self.best.append(best[key][0])
            self.least.append(best[key][1])
        self.node = [_objective(c[:, 0], c[:, 1], lam) for c in cg.node_costs]

    def local(self, i, skip=-1):
        """``(K_i, width)``: node ``i``'s cost and its edges' (at their best option) per config, with
        its neighbours' configs fixed; the edges to node ``skip`` left out."""
        total = self.node[i].copy()
        for e in self.inc[i]:
            u, v, smap, dmap, _tab = self.cg._norm[e]
            if skip in (u, v):
                continue
            total += self.best[e][smap, dmap[self.ch[v]]] if u == i else self.best[e][smap[self.ch[u]], dmap]
        return total

    def move_node(self, i):
        total = self.local(i)
        k = int(_argbest(total, axis=0))
        if k != self.ch[i] and _better(total[k], total[self.ch[i]]):
            self.ch[i] = k
            return True
        return False

    def move_pair(self, u, v):
        """Move the two ends of an edge together (all edges between them count jointly)."""
        lu, lv = self.local(u, skip=v), self.local(v, skip=u)
        between = [e for e in self.inc[u] if {self.cg._norm[e][0], self.cg._norm[e][1]} == {u, v}]
        # most pairs cannot move: no pair of configs sums below the least of each part (summed in
        # the order of the joint costs below, so rounding keeps every joint cost above the bound)
        current = lu[self.ch[u]] + lv[self.ch[v]]
        bound = lu.min(axis=0) + lv.min(axis=0)
        for e in between:
            a, b, smap, dmap, _tab = self.cg._norm[e]
            current = current + self.best[e][smap[self.ch[a]], dmap[self.ch[b]]]
            bound = bound + self.least[e]
        if not _better(bound, current):
            return False
        joint = lu[:, None, :] + lv[None, :, :]
        for e in between:
            a, b, smap, dmap, _tab = self.cg._norm[e]
            pair = self.best[e][np.ix_(smap, dmap)]  # (K_a, K_b, width)
            joint += pair if a == u else pair.transpose(1, 0, 2)
        flat = joint.reshape(-1, joint.shape[-1])
        k = int(_argbest(flat, axis=0))
        now = self.ch[u] * joint.shape[1] + self.ch[v]
        if k != now and _better(flat[k], flat[now]):
            self.ch[u], self.ch[v] = divmod(k, joint.shape[1])
            return True
        return False

    def sweeps(self, max_sweeps):
        """Move nodes, then edges' ends, until nothing moves; a move is only tried again once
        something around it moved (a node's best config depends on its neighbours' alone)."""
        pairs = sorted({(min(u, v), max(u, v)) for u, v, *_rest in self.cg._norm if u != v})
        dirty = set(range(self.cg.n_nodes))
        for _ in range(max_sweeps):
            if not dirty:
                break
            now, dirty = dirty, set()
            for i in sorted(now):
                if self.move_node(i):
                    dirty |= {i} | self.nbrs[i]
            for u, v in pairs:
                if (u in now or v in now or u in dirty or v in dirty) and self.move_pair(u, v):
                    dirty |= {u, v} | self.nbrs[u] | self.nbrs[v]


def descend(cg, choices, edge_choices, lam, max_sweeps=_DESCENT_SWEEPS):
    """A strategy that no move of one node, or of the two ends of one edge, improves for
    ``time + lam * memory``, reached from a given strategy by such moves.

    Each sweep moves nodes (in order) to their config of least ``time + lam * memory`` with
    their neighbours' configs fixed (the incident edges at their best option for it), then
    edges' two ends together to their best pair of configs, each only when that beats what it
    has; sweeps repeat until nothing moves (or ``max_sweeps``), the first over everything, the
    next ones only around what moved (a move's value depends on its neighbourhood alone). With
    ``lam = inf`` the objective is memory, then time. Every move strictly improves the objective, so the
    result is never worse than the start. A heuristic for the ends of a frontier whose exact
    optima (:func:`~tensoropt_py.engine.min_sum`) are out of reach.

    Parameters
    ----------
    cg : CostGraph
    choices : array_like of int, shape (n_nodes,)
        The starting strategy's configs.
    edge_choices : array_like of int, shape (n_edges,)
        Its edges' options (kept where an option is already the best for the objective;
        else the best one).
    lam : float
        Weight of memory (seconds per byte), ``>= 0``; ``inf``: least memory, then time.
    max_sweeps : int
        Most sweeps over the nodes and edges.

    Returns
    -------
    choices, edge_choices : ndarray of int64
        The strategy reached.

    Raises
    ------
    InvalidInputError
        For a ``lam`` that is negative or NaN, a ``max_sweeps`` below 1, or strategies of the
        wrong shape or out of range.

    Examples
    --------
    >>> import numpy as np
    >>> nodes = [np.array([[1.0, 4.0], [4.0, 1.0]])] * 2
    >>> edge = np.array([[[[0.0, 0.0]], [[0.0, 3.0]]], [[[0.0, 3.0]], [[0.0, 0.0]]]])
    >>> cg = CostGraph(nodes, [(0, 1, edge)])
    >>> ch, ech = descend(cg, [0, 1], [0], 0.0)  # time 8 -> 2: node 0 moves to its fast config
    >>> ch.tolist()
    [1, 1]
    >>> descend(cg, [0, 0], [0], 0.0)[0].tolist()  # a node alone would pay 3 more: both move
    [1, 1]
    """
    ch, ech, lam = _check(cg, choices, edge_choices, lam)
    parse_count(max_sweeps, "max_sweeps")
    _Descent(cg, ch, lam).sweeps(max_sweeps)
    _best_options(cg, ch, ech, lam)
    return ch, ech


_WINDOW = 40  # nodes per window of reoptimize_windows (Llama-8B-shaped layers: most are narrow enough)
_WINDOW_MAX_ENTRIES = 5_000_000  # min_sum's largest factor in one window
_WINDOW_MAX_WORK = 2e8  # and its terms: a window past either is left as it is


def reoptimize_windows(cg, choices, edge_choices, lam, window=_WINDOW, max_entries=_WINDOW_MAX_ENTRIES,
                       max_work=_WINDOW_MAX_WORK):
    """A strategy no worse for ``time + lam * memory``, found by re-solving windows of
    consecutive nodes exactly with the rest fixed.

    The windows hold ``window`` nodes of ``cg.topological_order`` and overlap by half. Each is
    a small CostGraph: its nodes, the edges between them, and the edges to the fixed nodes
    folded into its nodes' costs (at their best option); its exact optimum
    (:func:`~tensoropt_py.engine.min_sum`) replaces the window's configs when it is better by
    more than rounding. A window too wide for ``max_entries`` / ``max_work`` is left as it is.
    With ``lam = inf`` the objective is memory, then time.

    Parameters
    ----------
    cg : CostGraph
    choices : array_like of int, shape (n_nodes,)
        The starting strategy's configs.
    edge_choices : array_like of int, shape (n_edges,)
        Its edges' options (each ends at the best option for the objective).
    lam : float
        Weight of memory (seconds per byte), ``>= 0``; ``inf``: least memory, then time.
    window : int
        Nodes per window (a window of every node solves the whole graph exactly).
    max_entries, max_work : int
        :func:`~tensoropt_py.engine.min_sum`'s limits for one window.

    Returns
    -------
    choices, edge_choices : ndarray of int64
        The strategy reached.
    solved : int
        Windows narrow enough to be solved (the others were left as they were).

    Raises
    ------
    InvalidInputError
        For a bad ``lam``, ``window``, ``max_entries`` or ``max_work``, or strategies of the
        wrong shape or out of range.

    Examples
    --------
    >>> import numpy as np
    >>> nodes = [np.array([[1.0, 4.0], [4.0, 1.0]])] * 3
    >>> edge = np.array([[[[0.0, 0.0]], [[0.0, 3.0]]], [[[0.0, 3.0]], [[0.0, 0.0]]]])
    >>> cg = CostGraph(nodes, [(0, 1, edge), (1, 2, edge)])
    >>> ch, ech, solved = reoptimize_windows(cg, [0, 0, 0], [0, 0], 0.0, window=3)  # time 12 -> 3
    >>> ch.tolist(), solved
    ([1, 1, 1], 1)
    """
    ch, ech, lam = _check(cg, choices, edge_choices, lam)
    parse_count(window, "window")
    parse_count(max_entries, "max_entries")
    if isinstance(max_work, bool) or not isinstance(max_work, (int, float, np.number)) or not max_work > 0:
        raise InvalidInputError(f"max_work must be a number > 0, got {max_work!r}")
    order = np.asarray(cg.topological_order, dtype=np.int64)
    state = _Descent(cg, ch, lam)
    step = max(1, window // 2)
    solved = 0
    # a window's move by its content and current configs (repeated layers repeat windows)
    moves, tables = {}, {}
    for start in range(0, max(1, cg.n_nodes - window + step), step):
        nodes = order[start:start + window]
        inside = np.zeros(cg.n_nodes, dtype=bool)
        inside[nodes] = True
        try:
            sub = _window_graph(cg, state, nodes, inside)
        except InvalidInputError:  # a node left no finite config with the rest as it is
            continue
        key = (content_digest(sub, tables), ch[nodes].tobytes())
        if key not in moves:
            moves[key] = _window_move(sub, ch[nodes], lam, max_entries, max_work)
        move = moves[key]
        if move is None:  # too wide (or too much work) for exact elimination, or no finite strategy
            continue
        solved += 1
        if move is not True:
            ch[nodes] = move
    _best_options(cg, ch, ech, lam)
    return ch, ech, solved


def _window_move(sub, current, lam, max_entries, max_work):
    """The optimum of window graph ``sub`` (:func:`~tensoropt_py.engine.min_sum`) where it beats
    its configs ``current`` by more than rounding, True where it does not, None where the
    window is too wide for the limits or has no finite strategy."""
    try:
        opt = min_sum(sub, lam, max_entries=int(max_entries), max_work=max_work)
    except (InvalidInputError, InfeasibleError):
        return None
    return opt.choices if _better(_value(sub, opt.choices, lam), _value(sub, current, lam)) else True


def _window_graph(cg, state, nodes, inside):
    """The CostGraph of a window: its nodes (in the order of ``nodes``), the edges between them
    as they are, and the edges to fixed nodes folded into its nodes' costs at their best
    option (as (memory, time) pairs, so that the window's objective is the whole one's up to a
    constant)."""
    local = {int(i): k for k, i in enumerate(nodes)}
    costs = []
    for i in nodes:
        c = np.array(cg.node_costs[i], dtype=np.float64)
        for e in state.inc[i]:
            u, v, smap, dmap, tab = cg._norm[e]
            if inside[u] and inside[v]:
                continue
            rows = tab[smap, dmap[state.ch[v]]] if u == i else tab[smap[state.ch[u]], dmap]  # (K, R, 2)
            cost = _objective(rows[..., 0], rows[..., 1], state.lam)
            best = _argbest(cost, axis=-1)
            c += np.take_along_axis(rows, best[:, None, None], axis=1)[:, 0, :]
        costs.append(c)
    edges = [(local[u], local[v], LayoutEdge(smap, dmap, tab)) for u, v, smap, dmap, tab in cg._norm
             if inside[u] and inside[v]]
    return CostGraph(costs, edges)


def _value(sub, choices, lam):
    """The objective (:func:`_objective`) of configs ``choices`` of a window graph, its
    edges at their best option."""
    ech = np.full(sub.n_edges, -1, dtype=np.int64)
    _best_options(sub, choices, ech, lam)
    mem, tim = evaluate(sub, choices, ech)
    return _objective(mem, tim, lam)[0]
