"""Local search from a strategy: better strategies for one weighted objective where the
exact optimum (:func:`~tensoropt_py.engine.min_sum`) is out of reach.

* :func:`descend`: moves of one node, or of the two ends of one edge, while one improves
  ``time + lam * memory`` (a local optimum for such moves); :func:`descend_many` does it from
  several strategies, each for its own weight, in lockstep;
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
from ..units import parse_count, parse_positive
from .cost_graph import CostGraph, LayoutEdge, content_digest, evaluate
from .scalar import _min_sum_within, _weigh

__all__ = ["descend", "descend_many", "reoptimize_windows"]

_REL_TOL = 1e-9  # costs summed in different orders: a move must gain more than this


def _check(cg, choices, edge_choices, lam):
    """``(choices, edge_choices, lam)`` checked and copied (int64 arrays, float lam)."""
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    try:
        lam = float(lam)
    except (TypeError, ValueError):
        raise InvalidInputError(f"lam must be a weight >= 0 (or inf), got {lam!r}") from None
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


def _incidence(cg):
    """Per node, its incident edges and its neighbours."""
    inc = [[] for _ in range(cg.n_nodes)]
    nbrs = [set() for _ in range(cg.n_nodes)]
    for e, (u, v, *_rest) in enumerate(cg._norm):
        inc[u].append(e)
        inc[v].append(e)
        nbrs[u].add(v)
        nbrs[v].add(u)
    return inc, nbrs


class _Descent:
    """The state of :func:`descend_many`: strategies' configs ``ch`` ``(S, n_nodes)``, one weight
    each, and the objective of moving their nodes. The strategies move in lockstep, each by
    its own moves: the Python work of a move is paid once for all of them."""

    def __init__(self, cg, ch, lams):
        self.cg, self.ch = cg, ch
        S = len(lams)
        self.width = 2 if any(np.isinf(lam) for lam in lams) else 1
        self.rows = np.arange(S)
        self.inc, self.nbrs = _incidence(cg)
        best = {}  # per edge cost array (layers share theirs): its classes' pairs at their best option
        self.best = []  # (S, A, B, width) per edge
        self.least = []  # and the least of those (per component), (S, width): a bound for move_pair
        for u, v, _smap, _dmap, tab in cg._norm:
            key = table_key(tab)
            if key not in best:
                at_best = np.stack([self._widen(_at_best_option(tab, lam)) for lam in lams])
                best[key] = at_best, at_best.reshape(S, -1, self.width).min(axis=1)
            self.best.append(best[key][0])
            self.least.append(best[key][1])
        self.node = [np.stack([self._widen(_objective(c[:, 0], c[:, 1], lam)) for lam in lams]) for c in cg.node_costs]

    def _widen(self, cost):
        """One weight's costs in this state's width: a sum and a zero where another weight
        compares memory, then time (a zero second component changes no comparison)."""
        if cost.shape[-1] == self.width:
            return cost
        return np.concatenate([cost, np.zeros_like(cost)], axis=-1)

    def local(self, i, skip=-1):
        """``(S, K_i, width)``: node ``i``'s cost and its edges' (at their best option) per config, with
        its neighbours' configs fixed; the edges to node ``skip`` left out."""
        total = self.node[i].copy()
        rows = self.rows[:, None]
        for e in self.inc[i]:
            u, v, smap, dmap, _tab = self.cg._norm[e]
            if skip in (u, v):
                continue
            if u == i:
                total += self.best[e][rows, smap[None, :], dmap[self.ch[:, v]][:, None]]
            else:
                total += self.best[e][rows, smap[self.ch[:, u]][:, None], dmap[None, :]]
        return total

    def move_node(self, i, active):
        """Move node ``i`` of the ``active`` strategies (bool ``(S,)``) where that improves them;
        returns which moved."""
        total = self.local(i)
        k = _argbest(total, axis=1)
        now = self.ch[:, i]
        moved = active & (k != now) & _better_rows(total[self.rows, k], total[self.rows, now])
        self.ch[moved, i] = k[moved]
        return moved

    def move_pair(self, u, v, active):
        """Move the two ends of an edge together (all edges between them count jointly), in the
        ``active`` strategies where that improves them; returns which moved."""
        lu, lv = self.local(u, skip=v), self.local(v, skip=u)
        between = [e for e in self.inc[u] if {self.cg._norm[e][0], self.cg._norm[e][1]} == {u, v}]
        # most pairs cannot move: no pair of configs sums below the least of each part (summed in
        # the order of the joint costs below, so rounding keeps every joint cost above the bound)
        current = lu[self.rows, self.ch[:, u]] + lv[self.rows, self.ch[:, v]]
        bound = lu.min(axis=1) + lv.min(axis=1)
        for e in between:
            a, b, smap, dmap, _tab = self.cg._norm[e]
            current = current + self.best[e][self.rows, smap[self.ch[:, a]], dmap[self.ch[:, b]]]
            bound = bound + self.least[e]
        moved = active & _better_rows(bound, current)
        if not moved.any():
            return moved
        s = np.flatnonzero(moved)
        joint = lu[s][:, :, None, :] + lv[s][:, None, :, :]  # (S', K_u, K_v, width)
        for e in between:
            a, b, smap, dmap, _tab = self.cg._norm[e]
            # the edge's classes expanded to configs, u's on axis 1: one axis at a time (a gather
            # on three index arrays at once measured 3.7x slower on the zoo RNN's 413 configs)
            at = self.best[e][s]  # (S', A, B, width)
            if a == u:
                joint += np.take(np.take(at, smap, axis=1), dmap, axis=2)
            else:
                joint += np.take(np.take(at.transpose(0, 2, 1, 3), dmap, axis=1), smap, axis=2)
        flat = joint.reshape(s.size, -1, self.width)
        k = _argbest(flat, axis=1)
        here = np.arange(s.size)
        now = self.ch[s, u] * joint.shape[2] + self.ch[s, v]
        better = (k != now) & _better_rows(flat[here, k], flat[here, now])
        moved[:] = False
        moved[s[better]] = True
        self.ch[s[better], u], self.ch[s[better], v] = np.divmod(k[better], joint.shape[2])
        return moved

    def sweeps(self, max_sweeps):
        """Move nodes, then edges' ends, until nothing moves; a move is only tried again once
        something around it moved (a node's best config depends on its neighbours' alone)."""
        S = self.ch.shape[0]
        pairs = sorted({(min(u, v), max(u, v)) for u, v, *_rest in self.cg._norm if u != v})
        dirty = [set(range(self.cg.n_nodes)) for _ in range(S)]  # per strategy
        for _ in range(max_sweeps):
            if not any(dirty):
                break
            now, dirty = dirty, [set() for _ in range(S)]
            for i in sorted(set().union(*now)):
                for r in np.flatnonzero(self.move_node(i, np.array([i in n for n in now]))):
                    dirty[r] |= {i} | self.nbrs[i]
            touched = set().union(*now, *dirty)
            for u, v in pairs:
                if u not in touched and v not in touched:
                    continue
                active = np.array([u in n or v in n or u in d or v in d for n, d in zip(now, dirty)])
                for r in np.flatnonzero(self.move_pair(u, v, active)):
                    around = {u, v} | self.nbrs[u] | self.nbrs[v]
                    dirty[r] |= around
                    touched |= around


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

    See Also
    --------
    descend_many : the same from several strategies at once, each with its own weight.

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
    ch, ech = descend_many(cg, [choices], [edge_choices], [lam], max_sweeps)
    return ch[0], ech[0]


_DESCENT_BATCH_BYTES = 1 << 28  # the per-strategy edge tables of the strategies descending at once


def descend_many(cg, choices, edge_choices, lams, max_sweeps=_DESCENT_SWEEPS):
    """:func:`descend` from several strategies, each for its own weight, at once.

    Row ``r`` of the result is ``descend(cg, choices[r], edge_choices[r], lams[r])``; the
    strategies move in lockstep (those of finite weights together, those of weight inf together,
    as many at once as the tables of the edges' best options for their weights fit in 256 MiB),
    so that each move's Python work is paid once for all of them.

    Parameters
    ----------
    cg : CostGraph
    choices : array_like of int, shape (S, n_nodes)
        The starting strategies' configs.
    edge_choices : array_like of int, shape (S, n_edges)
        Their edges' options.
    lams : sequence of float, length S
        The weight of memory of each (``>= 0``; ``inf``: least memory, then time).
    max_sweeps : int
        Most sweeps over the nodes and edges.

    Returns
    -------
    choices, edge_choices : ndarray of int64, shape (S, n_nodes) and (S, n_edges)
        The strategies reached.

    Raises
    ------
    InvalidInputError
        For a weight that is negative or NaN, a ``max_sweeps`` below 1, strategies of the
        wrong shape or out of range, or not one weight per strategy.

    Examples
    --------
    >>> import numpy as np
    >>> nodes = [np.array([[1.0, 4.0], [4.0, 1.0]])] * 2
    >>> edge = np.array([[[[0.0, 0.0]], [[0.0, 3.0]]], [[[0.0, 3.0]], [[0.0, 0.0]]]])
    >>> cg = CostGraph(nodes, [(0, 1, edge)])
    >>> ch, ech = descend_many(cg, [[0, 1], [1, 0]], [[0], [0]], [0.0, np.inf])
    >>> ch.tolist()  # the fastest; the smallest (memory 2, then time 8)
    [[1, 1], [0, 0]]
    """
    parse_count(max_sweeps, "max_sweeps")
    try:
        choices, edge_choices = np.asarray(choices), np.asarray(edge_choices)
        lams = np.asarray(lams, dtype=object)
    except (TypeError, ValueError) as exc:  # ragged rows
        raise InvalidInputError(f"descend_many needs rectangular strategies and edge options: {exc}") from None
    if lams.ndim != 1 or choices.ndim != 2 or edge_choices.ndim != 2 or not lams.size == len(choices) == len(edge_choices):
        raise InvalidInputError(f"descend_many needs strategies (S, n_nodes), their edge options (S, n_edges) and S "
                                f"weights, got shapes {choices.shape}, {edge_choices.shape} and {lams.shape}")
    checked = [_check(cg, c, e, lam) for c, e, lam in zip(choices, edge_choices, lams)]
    ch = np.array([c[0] for c in checked], dtype=np.int64).reshape(len(checked), cg.n_nodes)
    ech = np.array([c[1] for c in checked], dtype=np.int64).reshape(len(checked), cg.n_edges)
    lams = [c[2] for c in checked]
    tables = {table_key(tab): tab.shape[0] * tab.shape[1] for *_r, tab in cg._norm}
    per_strategy = 16 * (sum(tables.values()) + sum(cg.n_configs))  # bytes, at width 2
    batch = max(1, _DESCENT_BATCH_BYTES // max(per_strategy, 1))
    # a weight of inf compares two components: the others descend apart, in one component
    for group in ([r for r, lam in enumerate(lams) if np.isfinite(lam)], [r for r, lam in enumerate(lams) if np.isinf(lam)]):
        for lo in range(0, len(group), batch):
            rows = np.array(group[lo:lo + batch], dtype=np.int64)
            state = _Descent(cg, ch[rows], [lams[r] for r in rows])
            state.sweeps(max_sweeps)
            ch[rows] = state.ch
    for r, lam in enumerate(lams):
        _best_options(cg, ch[r], ech[r], lam)
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
    parse_positive(max_work, "max_work")
    order = np.asarray(cg.topological_order, dtype=np.int64)
    inc, _ = _incidence(cg)
    step = max(1, window // 2)
    solved = 0
    # a window's move by its content and current configs (repeated layers repeat windows)
    moves, tables = {}, {}
    for start in range(0, max(1, cg.n_nodes - window + step), step):
        nodes = order[start:start + window]
        inside = np.zeros(cg.n_nodes, dtype=bool)
        inside[nodes] = True
        try:
            sub = _window_graph(cg, inc, ch, lam, nodes, inside)
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
        # not min_sum: a window no faster at lam 0 is no move, whatever its memory
        opt, _, _ = _min_sum_within(sub, lam, int(max_entries), int(max_entries), max_work)
    except (InvalidInputError, InfeasibleError):
        return None
    return opt.choices if _better(_value(sub, opt.choices, lam), _value(sub, current, lam)) else True


def _window_graph(cg, inc, ch, lam, nodes, inside):
    """The CostGraph of a window: its nodes (in the order of ``nodes``), the edges between them
    as they are, and the edges to fixed nodes (configs ``ch``; ``inc``: each node's edges)
    folded into its nodes' costs at their best option for ``lam`` (as (memory, time) pairs,
    so that the window's objective is the whole one's up to a constant)."""
    local = {int(i): k for k, i in enumerate(nodes)}
    costs = []
    for i in nodes:
        c = np.array(cg.node_costs[i], dtype=np.float64)
        for e in inc[i]:
            u, v, smap, dmap, tab = cg._norm[e]
            if inside[u] and inside[v]:
                continue
            rows = tab[smap, dmap[ch[v]]] if u == i else tab[smap[ch[u]], dmap]  # (K, R, 2)
            cost = _objective(rows[..., 0], rows[..., 1], lam)
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
