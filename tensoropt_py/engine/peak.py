"""Memory as a peak over time: interval usages, the fastest strategy under a peak limit,
and the exact (peak, time) frontier.

The additive model of :class:`CostGraph` sums the memory of every chosen config. Many
problems (the IOPDDL sharding contest among them) charge a config's memory only while it
is live instead: node ``i`` is live on the integer time steps ``[start_i, end_i)`` and, with
config ``k``, uses ``usage[i][k]`` bytes at each of them. The **peak** of a strategy is the
largest, over steps, of the summed usages of the nodes live at that step.

Relation to the CostGraph: the peak *replaces* its memory column (node and edge memories
are ignored; forbidden entries stay forbidden), and a strategy's time is the CostGraph's
summed time, edges included. As the peak does not depend on edge options, every edge takes
its fastest allowed option.

Only the steps where the live set is maximal matter (a step whose live set is contained
in another step's has no larger load, usages being non-negative), so the time axis is
compressed to those steps (the maximal cliques of the interval graph, at most one per node).

:func:`min_time_under_peak` solves ``min time s.t. peak <= limit`` by Lagrangian
relaxation: multipliers ``lam_t >= 0`` per step turn the limit into per-config costs
``time + usage * sum of lam over the node's steps``, minimised exactly by variable
elimination (the same bucket elimination as :func:`~tensoropt_py.engine.min_sum`, with
its order and pairwise tables built once per solve, as only the unary costs change
between subproblems); the dual value is a lower bound on the optimum,
raised by projected subgradient ascent (Polyak steps). Every Lagrangian solution is turned
into a feasible strategy by a repair step (cut the usage of nodes live at the most violated
step, cheapest time increase per byte first) and improved by local search (single-node
moves that cut time and keep the peak under the limit; on the incumbent, also pair moves
where a second node frees the usage a faster config needs). Branch and bound over node configs
(best bound first, a node budget) makes it exact on small graphs; subproblems with few
strategies are enumerated. :func:`peak_frontier` repeats it with limits just below the
last peak found (the epsilon-constraint method).
"""

from __future__ import annotations

import copy
import heapq
import math
import time as _time
from dataclasses import dataclass, field

import numpy as np

from ..errors import InfeasibleError, InvalidInputError
from ..units import parse_count
from .algebra import frontier_indices
from .cost_graph import MAX_BRUTE_FORCE_STRATEGIES, CostGraph, _check_choices, evaluate

__all__ = [
    "IntervalUsage",
    "PeakOptimum",
    "PeakFrontier",
    "evaluate_peak",
    "brute_force_peak_frontier",
    "min_time_under_peak",
    "peak_frontier",
    "MAX_PLAN_ENTRIES",
]

_ENUMERATE_ENTRIES = 1 << 22
"""Most (strategy, node) entries an enumerated subproblem may hold at once."""
MAX_PLAN_ENTRIES = 1 << 25
"""Default limit on the table entries the exact Lagrangian solver stores (2**25, 256 MiB of float64)."""


def _int_array(x, name):
    arr = np.asarray(x)
    if arr.ndim != 1 or arr.shape[0] < 1:
        raise InvalidInputError(f"{name} must be a non-empty 1-d integer array, got shape {arr.shape}")
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise InvalidInputError(f"{name} must hold integers, got dtype {arr.dtype}")
    out = arr.astype(np.int64)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, slots=True, eq=False)
class IntervalUsage:
    """Live intervals and per-config usages of the nodes of a cost graph.

    Parameters
    ----------
    start, end : array_like of int, shape (n_nodes,)
        Node ``i`` is live on the integer steps ``start[i] <= t < end[i]``; ``start[i] ==
        end[i]`` means never live (its usage never counts).
    usage : sequence of array_like of float, each (K_i,)
        Bytes node ``i`` uses at each live step with each of its configs; finite, >= 0.

    Attributes
    ----------
    steps : ndarray of int64, shape (S,)
        The first time step of every kept step range (where the live set is maximal), ascending.
    lo, hi : ndarray of int64, shape (n_nodes,)
        Node ``i`` is live at kept steps ``lo[i] .. hi[i] - 1``.

    Raises
    ------
    InvalidInputError
        Naming the node and value: lengths that differ, ``end < start``, NaN, infinite
        or negative usage, an empty usage vector.

    Examples
    --------
    >>> u = IntervalUsage([0, 1, 3], [2, 4, 4], [[1.0, 2.0], [3.0], [5.0, 0.0]])
    >>> u.steps.tolist(), u.lo.tolist(), u.hi.tolist()
    ([1, 3], [0, 0, 1], [1, 2, 2])
    """

    start: np.ndarray
    end: np.ndarray
    usage: tuple
    steps: np.ndarray = field(init=False, repr=False)
    lo: np.ndarray = field(init=False, repr=False)
    hi: np.ndarray = field(init=False, repr=False)
    _flat: np.ndarray = field(init=False, repr=False)
    _offset: np.ndarray = field(init=False, repr=False)
    _live: tuple = field(init=False, repr=False)

    def __post_init__(self):
        start = _int_array(self.start, "start")
        end = _int_array(self.end, "end")
        n = start.shape[0]
        if end.shape[0] != n:
            raise InvalidInputError(f"start has {n} entries but end has {end.shape[0]}; both need one per node")
        bad = np.nonzero(end < start)[0]
        if bad.size:
            i = int(bad[0])
            raise InvalidInputError(f"node {i}: live interval [{start[i]}, {end[i]}) ends before it starts; need start <= end")
        try:
            usage_in = list(self.usage)
        except TypeError:
            raise InvalidInputError(f"usage must be a sequence of (K_i,) arrays, got {type(self.usage).__name__}") from None
        if len(usage_in) != n:
            raise InvalidInputError(f"usage has {len(usage_in)} entries but start/end describe {n} nodes")
        usage = []
        for i, row in enumerate(usage_in):
            try:
                arr = np.array(row, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"usage of node {i} is not a float array: {exc}") from None
            if arr.ndim != 1 or arr.shape[0] < 1:
                raise InvalidInputError(f"usage of node {i} must be a non-empty 1-d array, got shape {arr.shape}")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                k = int(np.argmax(~np.isfinite(arr) | (arr < 0)))
                raise InvalidInputError(f"usage of node {i}, config {k} is {arr[k]}; usages must be finite and >= 0")
            arr.flags.writeable = False
            usage.append(arr)
        live = end > start
        # a step range is kept when some interval starts at its first step and some ends
        # right after its last one: the maximal live sets of the interval graph
        starts = np.unique(start[live])
        ends = set(end[live].tolist())
        bounds = np.unique(np.concatenate([start[live], end[live]]))
        nxt = {int(a): int(b) for a, b in zip(bounds[:-1], bounds[1:])}
        steps = np.array([s for s in starts.tolist() if nxt.get(s) in ends], dtype=np.int64)
        lo = np.searchsorted(steps, start, side="left")
        hi = np.where(live, np.searchsorted(steps, end, side="left"), lo)
        offset = np.zeros(n + 1, dtype=np.int64)
        offset[1:] = np.cumsum([a.shape[0] for a in usage])
        flat = np.concatenate(usage)
        live_lists = _live_lists(flat, usage, lo, hi, steps.shape[0])
        for name, val in (("start", start), ("end", end), ("usage", tuple(usage)), ("steps", steps),
                          ("lo", lo.astype(np.int64)), ("hi", hi.astype(np.int64)),
                          ("_flat", flat), ("_offset", offset), ("_live", live_lists)):
            if isinstance(val, np.ndarray):
                val.flags.writeable = False
            object.__setattr__(self, name, val)

    @property
    def n_nodes(self):
        """Number of nodes (one interval and one usage vector each)."""
        return int(self.start.shape[0])

    @property
    def n_steps(self):
        """S, the number of kept steps."""
        return int(self.steps.shape[0])

    def check(self, cg):
        """Raise ``InvalidInputError`` unless these usages fit ``cg`` (one per node, K_i each).

        Parameters
        ----------
        cg : CostGraph

        Examples
        --------
        >>> cg = CostGraph([np.zeros((2, 2))], [])
        >>> IntervalUsage([0], [1], [[1.0, 2.0]]).check(cg)
        """
        if not isinstance(cg, CostGraph):
            raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
        if cg.n_nodes != self.n_nodes:
            raise InvalidInputError(f"usage describes {self.n_nodes} nodes but the cost graph has {cg.n_nodes}")
        for i, (a, K) in enumerate(zip(self.usage, cg.n_configs)):
            if a.shape[0] != K:
                raise InvalidInputError(f"usage of node {i} has {a.shape[0]} configs but the cost graph's node {i} has K={K}")

    def loads(self, choices):
        """Summed usage at every kept step of strategies ``choices`` (P, n_nodes) -> (P, S).

        Exact for integer byte counts (sums below 2**53). Otherwise each step's load is the
        rounded sum of the usages live there, taken in node order: it depends only on those
        usages, so strategies that differ only in nodes not live at a step get the same
        load there, and a config of larger usage never gives a smaller load.

        Parameters
        ----------
        choices : ndarray of int, shape (P, n_nodes)
            Config index of every node (assumed in range; :func:`evaluate_peak` checks).

        Examples
        --------
        >>> u = IntervalUsage([0, 1], [2, 3], [[1.0, 2.0], [4.0]])
        >>> u.loads(np.array([[0, 0], [1, 0]])).tolist()
        [[5.0], [6.0]]
        """
        choices = np.asarray(choices, dtype=np.int64)
        P = choices.shape[0]
        U = self._flat[self._offset[None, :-1] + choices]
        if self._live is None:  # integer usages: the running sum is exact
            diff = np.zeros((P, self.n_steps + 1))
            rows = np.arange(P)[:, None]
            np.add.at(diff, (rows, self.lo[None, :]), U)
            np.add.at(diff, (rows, self.hi[None, :]), -U)
            return np.cumsum(diff, axis=1)[:, : self.n_steps]
        nodes, starts = self._live
        out = np.empty((P, self.n_steps))
        if not self.n_steps:
            return out
        rows = max(1, _LOAD_CHUNK_ENTRIES // max(nodes.shape[0], 1))
        for a in range(0, P, rows):
            out[a:a + rows] = np.add.reduceat(U[a:a + rows, nodes], starts, axis=1)
        return out

    def __str__(self):
        return f"IntervalUsage(nodes={self.n_nodes}, kept_steps={self.n_steps})"

    __repr__ = __str__


@dataclass(frozen=True, slots=True, eq=False)
class PeakOptimum:
    """The fastest strategy found whose peak is within a limit, with a proven lower bound.

    Attributes
    ----------
    time : float
        The strategy's time (re-evaluated from the CostGraph).
    peak : float
        Its peak (<= ``limit``).
    choices : ndarray of int64, shape (n_nodes,)
    edge_choices : ndarray of int64, shape (n_edges,)
        The fastest allowed option of every edge.
    limit : float
    lower_bound : float
        No strategy with peak <= ``limit`` is faster than this (Lagrangian dual bounds of
        the open branch-and-bound nodes).
    gap : float
        ``(time - lower_bound) / time`` (0 when both are 0).
    optimal : bool
        Branch and bound finished: no strategy is faster than ``time`` by more than
        ``rtol * time``.
    n_nodes_explored : int
        Branch-and-bound nodes processed.
    n_oracle_calls : int
        Exact Lagrangian subproblems solved.
    seconds : float
    """

    time: float
    peak: float
    choices: np.ndarray
    edge_choices: np.ndarray
    limit: float
    lower_bound: float
    gap: float
    optimal: bool
    n_nodes_explored: int
    n_oracle_calls: int
    seconds: float


@dataclass(frozen=True, slots=True, eq=False)
class PeakFrontier:
    """The (peak, time) Pareto frontier of a cost graph under interval usages.

    Attributes
    ----------
    peak, time : ndarray of float64, shape (P,)
        Peak ascending, time strictly descending.
    choices : ndarray of int64, shape (P, n_nodes)
    edge_choices : ndarray of int64, shape (P, n_edges)
    exact : bool
        Every point is Pareto-optimal and no point is missing (every solve was proven
        optimal, and so was the infeasibility that ended the sweep).
    gap : ndarray of float64, shape (P,)
        Relative gap of the solve that found each point (0 where proven optimal).
    n_solves : int
    seconds : float
    """

    peak: np.ndarray
    time: np.ndarray
    choices: np.ndarray
    edge_choices: np.ndarray
    exact: bool
    gap: np.ndarray
    n_solves: int
    seconds: float

    def __len__(self):
        return int(self.peak.shape[0])

    def __str__(self):
        return f"PeakFrontier(points={len(self)}, exact={self.exact})"

    __repr__ = __str__


_LOAD_CHUNK_ENTRIES = 1 << 22
"""Most (strategy, live usage) entries :meth:`IntervalUsage.loads` gathers at once."""


def _live_lists(flat, usage, lo, hi, n_steps):
    """``None`` when every usage (``flat``: all of them, node after node) is an integer and the
    largest possible load is below 2**53 (running sums of them are exact), else ``(nodes,
    starts)``: the nodes live at every kept step, in node order, step after step, and where each
    step's list starts.

    A running sum (add a node's usage where it starts, subtract it where it ends) would carry
    the rounding of nodes no longer live into later steps, so that two strategies with the
    same usages at a step could load it differently; a sum over the live nodes alone cannot."""
    if np.all(flat == np.floor(flat)) and sum(float(a.max()) for a in usage) < 2.0 ** 53:
        return None
    span = hi - lo
    nodes = np.repeat(np.arange(lo.shape[0], dtype=np.int64), span)
    steps = np.repeat(lo, span) + (np.arange(nodes.shape[0]) - np.repeat(np.cumsum(span) - span, span))
    order = np.argsort(steps, kind="stable")  # node order within a step
    nodes = nodes[order]
    starts = np.searchsorted(steps[order], np.arange(n_steps))  # every kept step has a live node
    for arr in (nodes, starts):
        arr.flags.writeable = False
    return nodes, starts


def _fastest_options(cg, choices):
    """(P, n_edges): the fastest allowed option of every edge for strategies ``choices``."""
    out = np.zeros((choices.shape[0], cg.n_edges), dtype=np.int64)
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        if tab.shape[2] > 1:
            out[:, e] = tab[smap[choices[:, u]], dmap[choices[:, v]], :, 1].argmin(axis=1)
    return out


def _check_pair(cg, usage):
    if not isinstance(usage, IntervalUsage):
        raise InvalidInputError(f"usage must be an IntervalUsage, got {type(usage).__name__}")
    usage.check(cg)


def evaluate_peak(cg, usage, choices, edge_choices=None):
    """The (peak, time) of strategies: peak of summed live usages, CostGraph time.

    Parameters
    ----------
    cg : CostGraph
    usage : IntervalUsage
    choices : array_like of int, shape (P, n_nodes) or (n_nodes,)
    edge_choices : array_like of int, shape (P, n_edges), optional
        Option of every edge; default: the fastest allowed one.

    Returns
    -------
    peak, time : ndarray of float64, shape (P,)
        ``time`` is +inf for a strategy using a forbidden cost; ``peak`` is 0 when no node
        is ever live.

    Examples
    --------
    >>> cg = CostGraph([np.array([[0.0, 2.0], [0.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    >>> u = IntervalUsage([0, 1], [2, 3], [[1.0, 3.0], [1.0, 3.0]])
    >>> p, t = evaluate_peak(cg, u, [[0, 0], [1, 1]])
    >>> p.tolist(), t.tolist()
    ([2.0, 6.0], [4.0, 2.0])
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    _check_pair(cg, usage)
    ch, ech = _check_choices(cg, choices, edge_choices)
    if edge_choices is None:
        ech = _fastest_options(cg, ch)
    _, tim = evaluate(cg, ch, ech)
    peak = usage.loads(ch).max(axis=1) if usage.n_steps else np.zeros(ch.shape[0])
    return peak, tim


def brute_force_peak_frontier(cg, usage, max_strategies=MAX_BRUTE_FORCE_STRATEGIES):
    """The exact (peak, time) frontier by enumerating every (config, option) strategy (test oracle).

    Parameters
    ----------
    cg : CostGraph
    usage : IntervalUsage
    max_strategies : int
        Refuse (``InvalidInputError``) graphs with more strategies than this.

    Returns
    -------
    PeakFrontier
        Exact; ties keep the first strategy in enumeration order; empty when every
        strategy uses a forbidden cost.

    Examples
    --------
    >>> cg = CostGraph([np.array([[0.0, 2.0], [0.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    >>> u = IntervalUsage([0, 1], [2, 3], [[1.0, 3.0], [1.0, 3.0]])
    >>> fr = brute_force_peak_frontier(cg, u)
    >>> fr.peak.tolist(), fr.time.tolist()
    ([2.0, 4.0, 6.0], [4.0, 3.0, 2.0])
    """
    t0 = _time.perf_counter()
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    _check_pair(cg, usage)
    total = cg.n_strategies()
    if total > max_strategies:
        raise InvalidInputError(
            f"brute force would enumerate {total} strategies, more than max_strategies={max_strategies}"
        )
    radices = list(cg.n_configs) + [cg.n_options(e) for e in range(cg.n_edges)]
    idx = np.indices(radices).reshape(len(radices), -1).T
    choices = idx[:, : cg.n_nodes].astype(np.int64)
    edge_choices = idx[:, cg.n_nodes:].astype(np.int64)
    peak, tim = evaluate_peak(cg, usage, choices, edge_choices)
    sel = np.nonzero(np.isfinite(tim))[0]
    keep = sel[frontier_indices(peak[sel], tim[sel])]
    return PeakFrontier(
        peak=peak[keep], time=tim[keep], choices=choices[keep], edge_choices=edge_choices[keep], exact=True,
        gap=np.zeros(keep.shape[0]), n_solves=0, seconds=_time.perf_counter() - t0,
    )


def _range_max(values, lo, hi):
    """``max(values[lo[i]:hi[i]])`` for every i (``-inf`` for an empty range), by a sparse table."""
    S = values.shape[0]
    out = np.full(lo.shape[0], -np.inf)
    if S == 0:
        return out
    table = [values]
    width = 1
    while 2 * width <= S:
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    length = hi - lo
    nonempty = length > 0
    lev = np.zeros_like(length)
    lev[nonempty] = np.floor(np.log2(length[nonempty])).astype(np.int64)
    for j in np.unique(lev[nonempty]).tolist():
        m = nonempty & (lev == j)
        a, b = lo[m], hi[m] - (1 << j)
        out[m] = np.maximum(table[j][a], table[j][b])
    return out


class _MinSumPlan:
    """Exact ``min over x of sum_i unary_i[x_i] + sum_e T_e[x_u, x_v]`` for many unary vectors.

    The Lagrangian subproblems of one solve differ only in their unary costs, so the
    elimination order, the scopes and the summed pairwise tables of every step are built
    once (bucket elimination, the step with the smallest table first, like
    :func:`~tensoropt_py.engine.min_sum`); a solve is then a few NumPy operations per node.

    Parameters
    ----------
    n_configs : sequence of int
    tables : sequence of (u, v, T)
        ``T`` of shape (K_u, K_v); +inf marks a forbidden pair.
    max_entries : int
        Most table entries (summed pairwise tables and argmin tables of every step) the
        plan may store; more raises ``InvalidInputError`` (the graph is too wide).
    """

    def __init__(self, n_configs, tables, max_entries):
        n = len(n_configs)
        K = list(n_configs)
        pair = [dict() for _ in range(n)]
        for u, v, T in tables:
            pair[u].setdefault(v, []).append(T)
            pair[v].setdefault(u, []).append(T.T)
        adj = [set(d) for d in pair]
        alive = [True] * n
        msgs_of = [set() for _ in range(n)]
        msg_vars = {}

        def key(z):
            return (math.prod(K[y] for y in adj[z]) * K[z], len(adj[z]), z)

        keys = [key(z) for z in range(n)]
        heap = list(keys)
        heapq.heapify(heap)
        self.steps = []
        used = 0
        while heap:
            item = heapq.heappop(heap)
            x = item[2]
            if not alive[x] or keys[x] != item:
                continue
            others = tuple(sorted(adj[x]))
            scope = (x,) + others
            shape = tuple(K[z] for z in scope)
            size = math.prod(shape)
            used += size + size // K[x]
            if used > max_entries:
                raise InvalidInputError(
                    f"eliminating node {x} needs a table over nodes {scope} (configs {shape}); the plan would "
                    f"store {used} entries, more than max_entries={max_entries} allows (the graph is too wide "
                    f"for exact elimination)"
                )
            static = np.zeros(shape)
            for a, y in enumerate(others, start=1):
                for T in pair[x].get(y, ()):
                    static = static + T.reshape([K[x] if b == 0 else (K[y] if b == a else 1)
                                                 for b in range(len(scope))])
            incoming = []
            for mid in sorted(msgs_of[x]):
                mv = msg_vars.pop(mid)
                pos = [scope.index(z) for z in mv]
                incoming.append((mid, tuple(np.argsort(pos).tolist()),
                                 tuple(K[z] if z in mv else 1 for z in scope)))
                for z in mv:
                    if z != x:
                        msgs_of[z].discard(mid)
            mid = len(self.steps)
            if others:
                msg_vars[mid] = others
                for z in others:
                    msgs_of[z].add(mid)
                    adj[z].discard(x)
                    adj[z].update(y for y in others if y != z)
            alive[x] = False
            adj[x] = set()
            self.steps.append((x, others, static, tuple(incoming)))
            for z in others:
                keys[z] = key(z)
                heapq.heappush(heap, keys[z])
        self.n = n

    def solve(self, unary):
        """``(choices, value)`` minimising the sum for unary costs ``unary`` (list of (K_i,)),
        or None when every strategy has an infinite cost."""
        msgs = {}
        args = []
        total = 0.0
        for mid, (x, others, static, incoming) in enumerate(self.steps):
            tab = static + unary[x].reshape((-1,) + (1,) * len(others))
            for src, perm, bshape in incoming:
                tab = tab + msgs.pop(src).transpose(perm).reshape(bshape)
            arg = tab.argmin(axis=0)
            if others:
                msgs[mid] = tab.min(axis=0)
            else:
                total += float(tab[arg])
            args.append(arg)
        if not math.isfinite(total):
            return None
        choices = np.zeros(self.n, dtype=np.int64)
        for (x, others, _, _), arg in zip(reversed(self.steps), reversed(args)):
            choices[x] = int(arg[tuple(choices[z] for z in others)]) if others else int(arg)
        return choices, total


class _Search:
    """State of one ``min time s.t. peak <= limit`` solve (incumbent, counters, tables)."""

    def __init__(self, cg, usage, limit, iterations, max_enumerate, rtol, max_entries):
        self.cg, self.usage, self.limit = cg, usage, limit
        self.iterations, self.max_enumerate, self.rtol, self.max_entries = iterations, max_enumerate, rtol, max_entries
        self.n = cg.n_nodes
        self.t_node = [c[:, 1] for c in cg.node_costs]
        self.u = usage.usage
        self.lo, self.hi = usage.lo, usage.hi
        self.S = usage.n_steps
        # a config is dropped when even the least usages elsewhere overflow: with rounded
        # loads (non-integer usages), only by more than the rounding of a step's sum
        if usage._live is None or not self.S:
            self.rounding_share = 0.0
        else:
            counts = np.diff(np.append(usage._live[1], usage._live[0].shape[0]))
            self.rounding_share = 8.0 * (int(counts.max()) + 2) * float(np.finfo(np.float64).eps)
        # fastest-option time of every edge as a dense (K_u, K_v) table, seen from each end
        self.incident = [[] for _ in range(self.n)]
        t_cap = sum(float(t[np.isfinite(t)].max()) for t in self.t_node)
        K = cg.n_configs
        dense = sum(K[u] * K[v] for u, v, _ in cg.edges)
        if dense > max_entries:
            raise InvalidInputError(
                f"the edges' dense (K_u, K_v) time tables would hold {dense} entries, more than "
                f"max_entries={max_entries} allows (the graph is too wide for exact elimination)"
            )
        tables = []
        for u, v, smap, dmap, tab in cg._norm:
            T = tab[..., 1].min(axis=2)[np.ix_(smap, dmap)]
            tables.append((u, v, T))
            self.incident[u].append((v, T))
            self.incident[v].append((u, T.T))
            fin = T[np.isfinite(T)]
            t_cap += float(fin.max()) if fin.size else 0.0
        # no strategy of finite time is slower than this (kept positive so that a dual bound
        # above it proves infeasibility even when every time is 0)
        self.t_cap = t_cap * (1 + 1e-9) + 1e-300
        self.tables = tables
        self.shared = {}  # the elimination plan, built on first need and shared by with_limit()
        # flat tables: the time of a strategy in two gathers (offer runs once per subgradient step)
        self.t_flat = np.concatenate(self.t_node)
        self.t_off = np.concatenate([[0], np.cumsum(cg.n_configs)[:-1]]).astype(np.int64)
        if tables:
            self.e_u = np.array([u for u, _, _ in tables], dtype=np.int64)
            self.e_v = np.array([v for _, v, _ in tables], dtype=np.int64)
            self.e_kv = np.array([T.shape[1] for _, _, T in tables], dtype=np.int64)
            self.e_flat = np.concatenate([T.ravel() for _, _, T in tables])
            self.e_off = np.concatenate([[0], np.cumsum([T.size for _, _, T in tables])[:-1]]).astype(np.int64)
        # every (node config, incident edge) pair: where its edge time sits in e_flat given the
        # partner's config (base + partner config * stride), so all local times take one bincount
        self.node_of = np.repeat(np.arange(self.n), cg.n_configs)
        pos, base, partner, stride = [], [], [], []
        for e, (u, v, T) in enumerate(tables):
            ku, kv = T.shape
            pos += [self.t_off[u] + np.arange(ku), self.t_off[v] + np.arange(kv)]
            base += [self.e_off[e] + np.arange(ku) * kv, self.e_off[e] + np.arange(kv)]
            partner += [np.full(ku, v), np.full(kv, u)]
            stride += [np.ones(ku, dtype=np.int64), np.full(kv, kv)]
        cat = (lambda parts: np.concatenate(parts).astype(np.int64)) if tables else (lambda parts: np.zeros(0, np.int64))
        self.side_pos, self.side_base, self.side_partner, self.side_stride = map(cat, (pos, base, partner, stride))
        self.best_time = math.inf
        self.best_x = None
        self.n_oracle = 0
        self.explored = 0

    def with_limit(self, limit):
        """A fresh solve under ``limit`` sharing this one's tables and elimination plan (they do not
        depend on the limit; a sweep of limits builds them once)."""
        other = copy.copy(self)
        other.limit = limit
        other.best_time, other.best_x, other.n_oracle, other.explored = math.inf, None, 0, 0
        return other

    # -- primal side ------------------------------------------------------------------
    def cutoff(self):
        """Subtrees whose bound reaches this cannot hold a strictly better strategy."""
        if self.best_x is None:
            return self.t_cap
        return self.best_time - self.rtol * abs(self.best_time)

    def local_times(self, i, x):
        vec = self.t_node[i].copy()
        for o, T in self.incident[i]:
            vec += T[:, x[o]]
        return vec

    def strategy_time(self, x):
        t = float(self.t_flat[self.t_off + x].sum())
        if self.tables:
            t += float(self.e_flat[self.e_off + x[self.e_u] * self.e_kv + x[self.e_v]].sum())
        return t

    def offer(self, x):
        t = self.strategy_time(x)
        if not t < self.best_time:
            return
        if self.S and self.usage.loads(x[None, :]).max() > self.limit:
            return
        self.best_time = t
        self.best_x = x.copy()

    def repair(self, x, loads, allowed):
        """Cut the usage at the most violated step until none is violated (None on failure)."""
        for _ in range(4 * self.n + 4):
            excess = loads - self.limit
            t = int(np.argmax(excess))
            if excess[t] <= 0:
                return x, loads
            live = np.nonzero((self.lo <= t) & (self.hi > t))[0]
            best = None
            for i in live.tolist():
                cur = x[i]
                saved = self.u[i][cur] - self.u[i]
                vec = self.local_times(i, x)
                ok = allowed[i] & (saved > 0) & np.isfinite(vec)
                if not ok.any():
                    continue
                score = np.where(ok, (vec - vec[cur]) / np.where(ok, saved, 1.0), np.inf)
                k = int(np.argmin(score))
                if best is None or score[k] < best[0]:
                    best = (score[k], i, k)
            if best is None:
                return None
            _, i, k = best
            loads[self.lo[i]: self.hi[i]] -= self.u[i][x[i]] - self.u[i][k]
            x[i] = k
        return None

    def all_local_times(self, x):
        """(sum K_i,): the time of every node config with every other node as in ``x``."""
        local = self.t_flat.copy()
        if self.tables:
            w = self.e_flat[self.side_base + x[self.side_partner] * self.side_stride]
            local += np.bincount(self.side_pos, weights=w, minlength=local.shape[0])
        return local

    def improve(self, x, loads, allowed, passes=3):
        """Single-node moves that cut time and keep every step under the limit."""
        allowed_flat = np.concatenate(allowed)
        u_flat = self.usage._flat
        for _ in range(passes):
            # a vectorised screen finds the nodes with an improving move; each is re-checked
            # against the moves made before it
            local = self.all_local_times(x)
            now = (self.t_off + x)[self.node_of]  # flat index of each config's node's current config
            head = (self.limit - _range_max(loads, self.lo, self.hi))[self.node_of]
            fits = allowed_flat & np.isfinite(local) & (u_flat - u_flat[now] <= head)
            gain = local[now] - local
            cand = np.unique(self.node_of[fits & (gain > 1e-12 * np.abs(local[now]))])
            moved = False
            for i in cand.tolist():
                vec = self.local_times(i, x)
                cur = x[i]
                a, b = self.lo[i], self.hi[i]
                head = self.limit - loads[a:b].max() if b > a else math.inf
                ok = allowed[i] & np.isfinite(vec) & (self.u[i] - self.u[i][cur] <= head)
                k = int(np.argmin(np.where(ok, vec, np.inf)))
                if ok[k] and vec[k] < vec[cur] - 1e-12 * abs(vec[cur]):
                    loads[a:b] += self.u[i][k] - self.u[i][cur]
                    x[i] = k
                    moved = True
            if not moved:
                break

    def swap(self, x, loads, allowed):
        """Pair moves: node i takes a faster config that the limit blocks, and a node j live at
        every step it would overflow gives up enough usage, when the two together cut time."""
        moved = False
        for i in range(self.n):
            a, b = self.lo[i], self.hi[i]
            if a == b:
                continue
            vec = self.local_times(i, x)
            cur = x[i]
            ok = allowed[i] & (vec < vec[cur] - 1e-12 * abs(vec[cur]))
            if not ok.any():
                continue
            k = int(np.argmin(np.where(ok, vec, np.inf)))
            over = loads[a:b] + (self.u[i][k] - self.u[i][cur]) - self.limit
            tight = np.flatnonzero(over > 0) + a
            if tight.size == 0:  # it fits after all (improve stopped after its last pass)
                loads[a:b] += self.u[i][k] - self.u[i][cur]
                x[i] = k
                moved = True
                continue
            need = float(over.max())
            cover = np.flatnonzero((self.lo <= tight[0]) & (self.hi > tight[-1]))
            x[i] = k
            best = None
            for j in cover.tolist():
                if j == i:
                    continue
                vj = self.local_times(j, x)
                fits = allowed[j] & np.isfinite(vj) & (self.u[j][x[j]] - self.u[j] >= need)
                if not fits.any():
                    continue
                m = int(np.argmin(np.where(fits, vj, np.inf)))
                net = vec[k] - vec[cur] + vj[m] - vj[x[j]]
                if net < -1e-12 * abs(vec[cur]) and (best is None or net < best[0]):
                    best = (net, j, m)
            if best is None:
                x[i] = cur
                continue
            _, j, m = best
            loads[a:b] += self.u[i][k] - self.u[i][cur]
            loads[self.lo[j]: self.hi[j]] -= self.u[j][x[j]] - self.u[j][m]
            x[j] = m
            moved = True
        return moved

    def primal(self, x, loads, allowed):
        x, loads = x.copy(), loads.copy()
        if self.S and loads.max() > self.limit:
            fixed = self.repair(x, loads, allowed)
            if fixed is None:
                return
            x, loads = fixed
        self.improve(x, loads, allowed)
        self.offer(x)

    def polish(self, allowed):
        """Pair and single moves on the incumbent until neither helps (too slow for every
        Lagrangian solution, so it runs once per branch-and-bound node)."""
        if self.best_x is None:
            return
        x = self.best_x.copy()
        loads = self.usage.loads(x[None, :])[0]
        while self.swap(x, loads, allowed):
            self.improve(x, loads, allowed)
        self.offer(x)

    # -- dual side --------------------------------------------------------------------
    def oracle(self, lam, allowed):
        """Exact minimiser of the Lagrangian at ``lam`` over ``allowed`` configs, or None."""
        prefix = np.concatenate([[0.0], np.cumsum(lam)])
        weight = prefix[self.hi] - prefix[self.lo]
        plan = self.shared.get("plan")
        if plan is None:
            plan = self.shared["plan"] = _MinSumPlan(self.cg.n_configs, self.tables, self.max_entries)
        flat = np.where(np.concatenate(allowed), self.t_flat + self.usage._flat * weight[self.node_of], np.inf)
        unary = np.split(flat, self.t_off[1:])
        self.n_oracle += 1
        res = plan.solve(unary)
        if res is None:
            return None
        total = float(lam.sum())
        # lam stays 0 without a limit: inf * 0 must not turn the bound into NaN
        return res[0], res[1] - (self.limit * total if total else 0.0)

    def dual(self, allowed, lam):
        """Subgradient ascent from ``lam``: (best bound, its multipliers, its minimiser)."""
        best = (-math.inf, lam, None)
        theta, stall = 1.0, 0
        for _ in range(self.iterations):
            res = self.oracle(lam, allowed)
            if res is None:
                return math.inf, lam, None
            x, g = res
            loads = self.usage.loads(x[None, :])[0]
            if g > best[0]:
                best, stall = (g, lam, x), 0
            else:
                # Polyak steps aimed at the best time overshoot once the bound nears the dual
                # optimum: halve them after 3 steps without a better bound, and stop at 1/1000
                stall += 1
                if stall >= 3:
                    theta, stall = theta / 2, 0
            self.primal(x, loads, allowed)
            cut = self.cutoff()
            if best[0] >= cut or theta < 1e-3:
                break
            sub = loads - self.limit
            d = np.where((lam > 0) | (sub > 0), sub, 0.0)
            norm2 = float(d @ d)
            if norm2 == 0.0:
                break  # x is feasible and complementary: g is the subproblem's optimum
            lam = np.maximum(0.0, lam + theta * (cut - g) / norm2 * d)
        return best

    # -- branch and bound -------------------------------------------------------------
    def propagate(self, allowed):
        """Drop configs that cannot fit even with every other live node at its smallest
        usage; False when some step cannot fit at all."""
        if self.S == 0:
            return True
        least = np.array([float(self.u[i][allowed[i]].min()) for i in range(self.n)])
        base = self.usage.loads(np.array([[int(np.flatnonzero(allowed[i] & (self.u[i] == least[i]))[0])
                                           for i in range(self.n)]]))[0]
        slack = self.limit - base
        if slack.min() < 0:  # loads never fall as usages grow: no strategy fits
            return False
        head = -_range_max(-slack, self.lo, self.hi)
        if self.rounding_share and math.isfinite(self.limit):
            head += self.rounding_share * self.limit
        for i in range(self.n):
            allowed[i] &= self.u[i] - least[i] <= head[i]
        return True

    def enumerate_all(self, allowed):
        """Offer the fastest strategy of ``allowed`` that keeps to the limit; return its time."""
        opts = [np.flatnonzero(a) for a in allowed]
        grid = np.indices([o.shape[0] for o in opts]).reshape(self.n, -1)
        X = np.stack([opts[i][grid[i]] for i in range(self.n)], axis=1)
        _, tim = evaluate(self.cg, X, _fastest_options(self.cg, X))
        if self.S:
            tim = np.where(self.usage.loads(X).max(axis=1) <= self.limit, tim, np.inf)
        k = int(np.argmin(tim))
        if math.isfinite(tim[k]):
            self.offer(X[k])
        return float(tim[k])

    def branch_var(self, x, allowed):
        sizes = np.array([a.sum() for a in allowed])
        spread = np.array([float(np.ptp(self.u[i][allowed[i]])) for i in range(self.n)])
        free = sizes > 1
        if self.S:
            t = int(np.argmax(self.usage.loads(x[None, :])[0] - self.limit))
            at_t = free & (self.lo <= t) & (self.hi > t)
            if at_t.any():
                free = at_t
        return int(np.argmax(np.where(free, spread + 1e-300 * sizes, -1.0)))

    def run(self, max_nodes):
        """Branch and bound; returns (lower bound, proven).

        The bound is the least of the bounds of the open nodes and of the nodes closed by
        their bound or by enumeration (the optimum lies in one of them)."""
        closed = math.inf
        root = [np.isfinite(t) for t in self.t_node]
        if not self.propagate(root):
            return math.inf, True
        heap = [(-math.inf, 0, (), np.zeros(self.S))]
        counter, explored = 1, 0
        while heap:
            bound, _, fix, lam = heap[0]
            if bound >= self.cutoff():
                closed = min(closed, bound)
                heapq.heappop(heap)
                continue
            if explored >= max_nodes:
                break
            heapq.heappop(heap)
            explored += 1
            allowed = [a.copy() for a in root]
            for i, k in fix:
                allowed[i][:] = False
                allowed[i][k] = root[i][k]
            if not all(a.any() for a in allowed) or not self.propagate(allowed):
                continue
            count = math.prod(int(a.sum()) for a in allowed)
            if count <= self.max_enumerate and count * self.n <= _ENUMERATE_ENTRIES:
                closed = min(closed, self.enumerate_all(allowed))
                continue
            g, lam2, x = self.dual(allowed, lam)
            self.polish(root)
            if x is None:
                continue
            if g >= self.cutoff():
                closed = min(closed, g)
                continue
            var = self.branch_var(x, allowed)
            for k in np.flatnonzero(allowed[var]).tolist():
                heapq.heappush(heap, (g, counter, fix + ((var, k),), lam2))
                counter += 1
        self.explored = explored
        open_bound = min((h[0] for h in heap), default=math.inf)
        return min(open_bound, closed, self.best_time), not heap


def _check_options(limit, max_nodes, iterations, max_enumerate, rtol, max_entries):
    try:
        limit = float(limit)
    except (TypeError, ValueError):
        raise InvalidInputError(f"limit must be a number of bytes >= 0 (or inf), got {limit!r}") from None
    if not limit >= 0:
        raise InvalidInputError(f"limit must be a number of bytes >= 0 (or inf), got {limit!r}")
    for name, val in (("max_nodes", max_nodes), ("iterations", iterations), ("max_enumerate", max_enumerate),
                      ("max_entries", max_entries)):
        parse_count(val, name)
    if not (isinstance(rtol, (int, float)) and 0 <= rtol < 1):
        raise InvalidInputError(f"rtol must be a float in [0, 1), got {rtol!r}")
    return limit


def _solve(cg, usage, limit, max_nodes, iterations, max_enumerate, rtol, max_entries, base=None):
    """``(PeakOptimum or None, proven)``: None means no strategy found (proven infeasible if proven).
    ``base``: a :class:`_Search` of the same graph whose tables and plan are reused."""
    t0 = _time.perf_counter()
    if base is None:
        s = _Search(cg, usage, limit, iterations, max_enumerate, rtol, max_entries)
    else:
        s = base.with_limit(limit)
    lower, proven = s.run(max_nodes)
    if s.best_x is None:
        return None, proven
    x = s.best_x[None, :]
    ech = _fastest_options(cg, x)
    peak, tim = evaluate_peak(cg, usage, x, ech)
    t = float(tim[0])
    lower = min(lower, t)
    gap = 0.0 if t == lower else (t - lower) / t
    return PeakOptimum(
        time=t, peak=float(peak[0]), choices=x[0], edge_choices=ech[0], limit=limit, lower_bound=float(lower),
        gap=float(gap), optimal=bool(proven), n_nodes_explored=s.explored, n_oracle_calls=s.n_oracle,
        seconds=_time.perf_counter() - t0,
    ), proven


def _least_peak_bound(usage, cg):
    """max over steps of the summed smallest allowed usages: no strategy peaks below it."""
    if usage.n_steps == 0:
        return 0.0
    least = [int(np.argmin(np.where(np.isfinite(c[:, 1]), u, np.inf))) for c, u in zip(cg.node_costs, usage.usage)]
    return float(usage.loads(np.array([least])).max())


def min_time_under_peak(cg, usage, limit, *, max_nodes=1000, iterations=50, max_enumerate=4096, rtol=1e-9,
                        max_entries=MAX_PLAN_ENTRIES):
    """The fastest strategy whose peak is at most ``limit`` (Lagrangian branch and bound).

    Parameters
    ----------
    cg : CostGraph
        Its times (nodes and edges) are the objective; its memory column is ignored.
    usage : IntervalUsage
        Live intervals and per-config usages (one per node of ``cg``).
    limit : float >= 0 or inf
        Largest allowed peak (bytes).
    max_nodes : int >= 1
        Branch-and-bound nodes to process; ``1`` solves the root relaxation only (large
        graphs: best strategy found, lower bound and gap).
    iterations : int >= 1
        Subgradient steps per branch-and-bound node (each solves one exact Lagrangian
        subproblem).
    max_enumerate : int >= 1
        Subproblems with at most this many strategies are enumerated instead.
    rtol : float in [0, 1)
        Branches whose bound is within ``rtol`` (relative) of the best time found are pruned.
    max_entries : int >= 1
        Most table entries the exact Lagrangian solver may store (its tables for every
        elimination step together); a wider graph raises ``InvalidInputError``.

    Returns
    -------
    PeakOptimum
        ``optimal`` says whether the search finished; ``lower_bound`` and ``gap`` hold in
        any case.

    Raises
    ------
    InvalidInputError
        For bad arguments, usages that do not fit ``cg``, or a graph too wide for exact
        elimination within ``max_entries`` (the message says so).
    InfeasibleError
        When no strategy with peak <= ``limit`` was found; the message says whether that
        is proven, and gives a lower bound on the least peak.

    Examples
    --------
    >>> cg = CostGraph([np.array([[0.0, 2.0], [0.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    >>> u = IntervalUsage([0, 1], [2, 3], [[1.0, 3.0], [1.0, 3.0]])
    >>> r = min_time_under_peak(cg, u, 4.0)
    >>> r.time, r.peak, r.optimal
    (3.0, 4.0, True)
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    _check_pair(cg, usage)
    limit = _check_options(limit, max_nodes, iterations, max_enumerate, rtol, max_entries)
    res, proven = _solve(cg, usage, limit, max_nodes, iterations, max_enumerate, rtol, max_entries)
    if res is None:
        bound = _least_peak_bound(usage, cg)
        how = "proven by branch and bound" if proven else f"not proven: the search stopped after max_nodes={max_nodes}"
        raise InfeasibleError(
            f"no strategy with peak <= limit={limit:g} ({how}); every strategy peaks at >= {bound:g} "
            f"(the summed smallest usages at the busiest step) or uses a forbidden cost",
            memory_cap=limit,
        )
    return res


def peak_frontier(cg, usage, *, max_points=10_000, max_nodes=1000, iterations=50, max_enumerate=4096, rtol=1e-9,
                  max_entries=MAX_PLAN_ENTRIES):
    """The (peak, time) frontier by the epsilon-constraint method.

    Starts from the fastest strategy (no limit) and repeatedly asks
    :func:`min_time_under_peak` for the fastest strategy peaking strictly below the last
    peak found, until none exists. A solve that matches the previous time replaces the
    previous point (same time, smaller peak).

    Parameters
    ----------
    cg : CostGraph
    usage : IntervalUsage
    max_points : int >= 1
        Stop after this many solves (the result is then not exact).
    max_nodes, iterations, max_enumerate, rtol, max_entries
        As in :func:`min_time_under_peak`, for every solve.

    Returns
    -------
    PeakFrontier
        ``exact`` when every solve, and the final infeasibility, was proven (within ``rtol``).

    Raises
    ------
    InvalidInputError
        For bad arguments (see :func:`min_time_under_peak`).
    InfeasibleError
        When every strategy uses a forbidden cost.

    Examples
    --------
    >>> cg = CostGraph([np.array([[0.0, 2.0], [0.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    >>> u = IntervalUsage([0, 1], [2, 3], [[1.0, 3.0], [1.0, 3.0]])
    >>> fr = peak_frontier(cg, u)
    >>> fr.peak.tolist(), fr.time.tolist(), fr.exact
    ([2.0, 4.0, 6.0], [4.0, 3.0, 2.0], True)
    """
    t0 = _time.perf_counter()
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    _check_pair(cg, usage)
    _check_options(0.0, max_nodes, iterations, max_enumerate, rtol, max_entries)
    parse_count(max_points, "max_points")
    points, exact, limit, solves = [], True, math.inf, 0
    base = _Search(cg, usage, limit, iterations, max_enumerate, rtol, max_entries)
    while True:
        if solves >= max_points:
            exact = False
            break
        res, proven = _solve(cg, usage, limit, max_nodes, iterations, max_enumerate, rtol, max_entries, base)
        solves += 1
        if res is None:
            exact &= proven
            break
        exact &= res.optimal
        if points and res.time <= points[-1].time:
            points[-1] = res
        else:
            points.append(res)
        if res.peak <= 0:
            break
        limit = float(np.nextafter(res.peak, -np.inf))
    if not points:
        raise InfeasibleError("every strategy of this cost graph uses a forbidden cost (>= FORBIDDEN_COST or +inf)")
    peak = np.array([p.peak for p in points])
    tim = np.array([p.time for p in points])
    keep = frontier_indices(peak, tim)
    return PeakFrontier(
        peak=peak[keep], time=tim[keep],
        choices=np.array([points[k].choices for k in keep], dtype=np.int64).reshape(len(keep), cg.n_nodes),
        edge_choices=np.array([points[k].edge_choices for k in keep], dtype=np.int64).reshape(len(keep), cg.n_edges),
        exact=bool(exact), gap=np.array([points[k].gap for k in keep]), n_solves=solves,
        seconds=_time.perf_counter() - t0,
    )
