"""The engine's input: a graph whose nodes and edges carry (memory, time) cost tables.

See DESIGN.md "Contracts". Node ``i`` has ``K_i`` configs with costs ``(K_i, 2)``
(memory_bytes, time_s). Edge ``(u, v, cost)`` costs ``(K_u, K_v, 2)``, or
``(K_u, K_v, R, 2)`` for ``R`` alternative options per config pair (``+inf`` marks an
absent option), or a :class:`LayoutEdge` (factored by tensor layouts). A strategy picks a
config per node and an option per edge; its cost is the sum of the picked costs (Eq. 3).

Edges may close cycles: pair costs have no direction for the engine, which chooses its
own elimination order. Costs ``>= FORBIDDEN_COST`` (1e17; 1e18 is the usual sentinel) and
``+inf`` mark forbidden configs, options and config pairs: they are stored as ``+inf``
(so they never enter a sum as a large finite number), and no strategy using one is
ever returned while a strategy without them exists.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..elimination.table import digest_arrays, table_key
from ..errors import CostGraphError, InvalidInputError
from .algebra import frontier_indices
from .result import TrackedFrontier

__all__ = ["LayoutEdge", "CostGraph", "evaluate", "brute_force_frontier", "MAX_BRUTE_FORCE_STRATEGIES", "FORBIDDEN_COST"]

MAX_BRUTE_FORCE_STRATEGIES = 1_000_000
FORBIDDEN_COST = 1e17
"""Costs at or above this mark a forbidden config / option / config pair (stored as +inf)."""


def _forbid(arr):
    """``arr`` (..., 2) with every (memory, time) pair holding a cost >= FORBIDDEN_COST (or
    +inf) replaced by (+inf, +inf); returns ``(array, n_forbidden)`` (the input if none)."""
    if arr.size == 0 or arr.max() < FORBIDDEN_COST:  # one vectorised pass, for the usual case of none
        return arr, 0
    bad = (arr >= FORBIDDEN_COST).any(axis=-1)
    nbad = int(bad.sum())
    if np.isposinf(arr[bad]).all():  # stored as +inf already (a restricted graph's tables)
        return arr, nbad
    out = np.array(arr, dtype=np.float64, copy=True)
    out[bad] = np.inf
    return out, nbad


def _readonly(a):
    a = np.array(a, copy=True) if a.flags.writeable or not a.flags.c_contiguous else a
    a.flags.writeable = False
    return a


def _check_costs(arr, what):
    """NaN / -inf / negative checks; +inf allowed (absent option) only where the caller says."""
    if arr.size == 0 or arr.min() >= 0:  # one vectorised pass (a NaN makes the minimum NaN)
        return
    if np.isnan(arr).any():
        bad = tuple(int(x) for x in np.argwhere(np.isnan(arr))[0])
        raise CostGraphError(f"{what} has NaN at index {bad}")
    if (arr < 0).any():
        bad = tuple(int(x) for x in np.argwhere(arr < 0)[0])
        raise CostGraphError(f"{what} has negative cost {arr[bad]} at index {bad}; costs must be >= 0")


def _layout_array(x, name):
    try:
        arr = np.asarray(x)
    except Exception as exc:  # pragma: no cover - defensive
        raise CostGraphError(f"{name} is not an array: {exc}") from None
    if arr.ndim != 1 or arr.shape[0] < 1:
        raise CostGraphError(f"{name} must be a non-empty 1-d integer array, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise CostGraphError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class LayoutEdge:
    """An edge cost factored by layouts: ``cost[k, p] = table[src_layout[k], dst_layout[p]]``.

    Parameters
    ----------
    src_layout : array_like of int, shape (K_u,)
        Output-layout class (``0 .. A-1``) of every config of the source node.
    dst_layout : array_like of int, shape (K_v,)
        Input-layout class (``0 .. B-1``) of every config of the destination node.
    table : array_like of float, shape (A, B, 2) or (A, B, R, 2)
        Cost (memory, time) of every layout pair (and option); ``+inf`` = absent option.

    Examples
    --------
    >>> e = LayoutEdge([0, 0, 1], [1, 0], np.zeros((2, 2, 2)))
    >>> str(e)
    'LayoutEdge(K_u=3, K_v=2, A=2, B=2, R=1)'
    """

    src_layout: np.ndarray
    dst_layout: np.ndarray
    table: np.ndarray

    def __post_init__(self):
        src = _layout_array(self.src_layout, "src_layout")
        dst = _layout_array(self.dst_layout, "dst_layout")
        try:
            tab = np.asarray(self.table, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise CostGraphError(f"LayoutEdge table is not a float array: {exc}") from None
        if tab.ndim not in (3, 4) or tab.shape[-1] != 2 or 0 in tab.shape:
            raise CostGraphError(f"LayoutEdge table must have shape (A, B, 2) or (A, B, R, 2), got {tab.shape}")
        A, B = tab.shape[:2]
        if src.min() < 0 or src.max() >= A:
            bad = int(np.argmax((src < 0) | (src >= A)))
            raise CostGraphError(f"src_layout[{bad}] = {src[bad]} is out of range [0, {A}) (table has A={A})")
        if dst.min() < 0 or dst.max() >= B:
            bad = int(np.argmax((dst < 0) | (dst >= B)))
            raise CostGraphError(f"dst_layout[{bad}] = {dst[bad]} is out of range [0, {B}) (table has B={B})")
        object.__setattr__(self, "src_layout", _readonly(src))
        object.__setattr__(self, "dst_layout", _readonly(dst))
        object.__setattr__(self, "table", _readonly(tab))

    @property
    def n_options(self):
        """R, the number of alternative options per layout pair."""
        return 1 if self.table.ndim == 3 else self.table.shape[2]

    def dense(self):
        """The equivalent dense ``(K_u, K_v, [R,] 2)`` cost array.

        Examples
        --------
        >>> LayoutEdge([0, 1], [0], np.arange(4.0).reshape(2, 1, 2)).dense()[:, 0].tolist()
        [[0.0, 1.0], [2.0, 3.0]]
        """
        return self.table[self.src_layout[:, None], self.dst_layout[None, :]]

    def __str__(self):
        A, B = self.table.shape[:2]
        return (
            f"LayoutEdge(K_u={self.src_layout.shape[0]}, K_v={self.dst_layout.shape[0]}, "
            f"A={A}, B={B}, R={self.n_options})"
        )


@dataclass(frozen=True, slots=True, eq=False)
class CostGraph:
    """A validated cost graph (any undirected graph of cost tables), the input of :func:`track`.

    Parameters
    ----------
    node_costs : sequence of array_like, each (K_i, 2)
        Memory (bytes) and time (s) of every config of node i; >= 0. A config with a cost
        ``>= FORBIDDEN_COST`` (1e17) or ``+inf`` is forbidden (stored as ``(inf, inf)``);
        every node needs one allowed config.
    edges : sequence of (u, v, cost)
        Edge between u and v; ``cost`` is ``(K_u, K_v, 2)``, ``(K_u, K_v, R, 2)`` or a
        :class:`LayoutEdge` indexed ``[k_u, k_v]``. ``+inf`` or a cost ``>= FORBIDDEN_COST``
        marks an absent option; a config pair without any allowed option is a forbidden
        combination. Multi-edges are allowed, and edges may close cycles: the direction
        of an edge only fixes the index order of its table (the engine picks its own
        elimination order; see ``topological_order`` and ``acyclic``). One cost array (or
        LayoutEdge) given for several edges, as repeated layers have, is stored once; the
        engine then knows those edges alike (see ``track(epsilon="auto")``).

    Attributes
    ----------
    topological_order : tuple of int
        A topological order of the edges' directions when ``acyclic``; otherwise Kahn's
        order where, when no node is free, the remaining node with fewest remaining
        incoming edges (then smallest index) goes next. Only used to pick where linear
        chains start.
    acyclic : bool
        Whether the directed edges form a DAG.
    n_forbidden : int
        Number of forbidden (memory, time) entries found in the input (node configs and
        edge options).

    Raises
    ------
    CostGraphError
        With the culprit named (node/edge index, shape, value): NaN, negative costs, bad
        shapes, a node whose every config is forbidden.

    Examples
    --------
    >>> cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([[0.0, 1.0]])],
    ...                [(0, 1, np.zeros((2, 1, 2)))])
    >>> str(cg)
    'CostGraph(nodes=2, edges=1, K<=2)'
    """

    node_costs: tuple
    edges: tuple
    topological_order: tuple = field(init=False, repr=False)
    acyclic: bool = field(init=False, repr=False)
    n_forbidden: int = field(init=False, repr=False)
    _norm: tuple = field(init=False, repr=False)

    def __post_init__(self):
        if isinstance(self.node_costs, np.ndarray) and self.node_costs.ndim == 3:
            nodes_in = list(self.node_costs)
        else:
            try:
                nodes_in = list(self.node_costs)
            except TypeError:
                raise CostGraphError(f"node_costs must be a sequence of (K_i, 2) arrays, got {type(self.node_costs).__name__}") from None
        if len(nodes_in) == 0:
            raise CostGraphError("a CostGraph needs at least one node")
        nodes = []
        n_forbidden = 0
        for i, c in enumerate(nodes_in):
            try:
                arr = np.asarray(c, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise CostGraphError(f"node {i}: costs are not a float array: {exc}") from None
            if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
                raise CostGraphError(f"node {i}: costs must have shape (K, 2) with K >= 1, got {arr.shape}")
            _check_costs(arr, f"node {i}")
            arr, nbad = _forbid(arr)
            n_forbidden += nbad
            if nbad == arr.shape[0]:
                raise CostGraphError(
                    f"node {i}: every one of its {arr.shape[0]} configs is forbidden "
                    f"(a cost >= {FORBIDDEN_COST:g} or +inf); no strategy exists"
                )
            nodes.append(_readonly(arr))
        n = len(nodes)
        try:
            edges_in = list(self.edges)
        except TypeError:
            raise CostGraphError(f"edges must be a sequence of (u, v, cost), got {type(self.edges).__name__}") from None
        edges, norm = [], []
        shared = {}  # id of a cost array given for several edges -> (stored array, forbidden count): stored once
        for e, item in enumerate(edges_in):
            try:
                u, v, cost = item
            except (TypeError, ValueError):
                raise CostGraphError(f"edge {e}: expected a (u, v, cost) triple, got {item!r:.80}") from None
            for name, x in (("source", u), ("target", v)):
                if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                    raise CostGraphError(f"edge {e}: {name} node must be an int, got {x!r}")
                if not 0 <= x < n:
                    raise CostGraphError(f"edge {e}: {name} node {x} does not exist (graph has {n} nodes)")
            u, v = int(u), int(v)
            if u == v:
                raise CostGraphError(f"edge {e}: self-loop on node {u}")
            Ku, Kv = nodes[u].shape[0], nodes[v].shape[0]
            if isinstance(cost, LayoutEdge):
                le = cost
                if le.src_layout.shape[0] != Ku:
                    raise CostGraphError(
                        f"edge {e} ({u}->{v}): src_layout has {le.src_layout.shape[0]} entries, node {u} has K={Ku}"
                    )
                if le.dst_layout.shape[0] != Kv:
                    raise CostGraphError(
                        f"edge {e} ({u}->{v}): dst_layout has {le.dst_layout.shape[0]} entries, node {v} has K={Kv}"
                    )
                known = shared.get(("layout", id(le.table)))
                if known is None:
                    _check_costs(le.table, f"edge {e} ({u}->{v}) layout table")
                    tab4, nbad = _forbid(le.table)
                    # (the table itself is held too, so that no other object takes its id meanwhile)
                    known = shared[("layout", id(le.table))] = (le.table, _readonly(tab4), nbad)
                _, tab4, nbad = known
                n_forbidden += nbad
                if nbad:  # the forbidden entries' copy, made once for every edge given this table
                    le = LayoutEdge(le.src_layout, le.dst_layout, tab4)
                tab = le.table if le.table.ndim == 4 else le.table[:, :, None, :]
                smap, dmap = le.src_layout, le.dst_layout
                stored = le
            else:
                known = shared.get(id(cost))
                try:
                    arr = np.asarray(cost, dtype=np.float64) if known is None else known[0]
                except (TypeError, ValueError) as exc:
                    raise CostGraphError(f"edge {e} ({u}->{v}): cost is not a float array or LayoutEdge: {exc}") from None
                if arr.ndim not in (3, 4) or arr.shape[:2] != (Ku, Kv) or arr.shape[-1] != 2 or 0 in arr.shape:
                    raise CostGraphError(
                        f"edge {e} ({u}->{v}): cost must have shape ({Ku}, {Kv}, 2) or ({Ku}, {Kv}, R, 2), got {arr.shape}"
                    )
                if known is None:
                    _check_costs(arr, f"edge {e} ({u}->{v})")
                    arr, nbad = _forbid(arr)
                    known = shared[id(cost)] = (_readonly(arr), nbad)
                arr, nbad = known
                n_forbidden += nbad
                tab = arr if arr.ndim == 4 else arr[:, :, None, :]
                smap = np.arange(Ku, dtype=np.int64)
                dmap = np.arange(Kv, dtype=np.int64)
                stored = arr
            edges.append((u, v, stored))
            norm.append((u, v, smap, dmap, tab))
        object.__setattr__(self, "node_costs", tuple(nodes))
        object.__setattr__(self, "edges", tuple(edges))
        object.__setattr__(self, "_norm", tuple(norm))
        order, acyclic = _toposort(n, [(u, v) for u, v, _ in edges])
        object.__setattr__(self, "topological_order", order)
        object.__setattr__(self, "acyclic", acyclic)
        object.__setattr__(self, "n_forbidden", n_forbidden)

    @property
    def n_nodes(self):
        return len(self.node_costs)

    @property
    def n_edges(self):
        return len(self.edges)

    @property
    def n_configs(self):
        """Tuple of K_i."""
        return tuple(c.shape[0] for c in self.node_costs)

    def n_options(self, e):
        """R of edge ``e`` (1 for a 3-d cost)."""
        return self._norm[e][4].shape[2]

    def n_strategies(self):
        """Number of (config, option) strategies, as a Python int (may be astronomically large).

        Examples
        --------
        >>> CostGraph([np.zeros((3, 2)), np.zeros((2, 2))], [(0, 1, np.zeros((3, 2, 2, 2)))]).n_strategies()
        12
        """
        total = 1
        for k in self.n_configs:
            total *= int(k)
        for e in range(self.n_edges):
            total *= int(self.n_options(e))
        return total

    def components(self):
        """Connected components (undirected) as tuples of node indices, in order of their smallest node."""
        parent = list(range(self.n_nodes))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for u, v, _ in self.edges:
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[max(ru, rv)] = min(ru, rv)
        groups: dict[int, list] = {}
        for i in range(self.n_nodes):
            groups.setdefault(find(i), []).append(i)
        return tuple(tuple(g) for g in sorted(groups.values()))

    def __str__(self):
        return f"CostGraph(nodes={self.n_nodes}, edges={self.n_edges}, K<={max(self.n_configs)})"

    __repr__ = __str__


def _toposort(n, edges):
    """``(order, acyclic)``: Kahn's order (smallest free index first); on a cycle, the
    remaining node with fewest remaining incoming edges (then smallest index) is taken
    next, so every graph gets an order."""
    import heapq

    indeg = [0] * n
    out = [[] for _ in range(n)]
    for u, v in edges:
        out[u].append(v)
        indeg[v] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    stuck = [(indeg[i], i) for i in range(n) if indeg[i] > 0]  # lazily updated
    heapq.heapify(stuck)
    done = [False] * n
    order = []
    acyclic = True
    while len(order) < n:
        if ready:
            x = heapq.heappop(ready)
            if done[x]:
                continue
        else:
            d, x = heapq.heappop(stuck)
            if done[x] or d != indeg[x]:
                continue
            acyclic = False
        done[x] = True
        order.append(x)
        for y in out[x]:
            indeg[y] -= 1
            if done[y]:
                continue
            if indeg[y] == 0:
                heapq.heappush(ready, y)
            else:
                heapq.heappush(stuck, (indeg[y], y))
    return tuple(order), acyclic


def _check_choices(cg, choices, edge_choices):
    choices = np.asarray(choices)
    if choices.ndim == 1:
        choices = choices[None, :]
    if choices.ndim != 2 or choices.shape[1] != cg.n_nodes:
        raise InvalidInputError(f"choices must have shape (P, {cg.n_nodes}), got {np.shape(choices)}")
    P = choices.shape[0]
    if edge_choices is None:
        edge_choices = np.zeros((P, cg.n_edges), dtype=np.int64)
    edge_choices = np.asarray(edge_choices)
    if edge_choices.ndim == 1:
        edge_choices = edge_choices[None, :]
    if edge_choices.shape != (P, cg.n_edges):
        raise InvalidInputError(f"edge_choices must have shape ({P}, {cg.n_edges}), got {edge_choices.shape}")
    if choices.size and choices.dtype.kind not in "iu":
        raise InvalidInputError(f"choices must be integers, got dtype {choices.dtype}")
    for i, K in enumerate(cg.n_configs):
        col = choices[:, i]
        if col.size and (col.min() < 0 or col.max() >= K):
            raise InvalidInputError(f"choices[:, {i}] must be in [0, {K}), got {int(col.min())}..{int(col.max())}")
    for e in range(cg.n_edges):
        R = cg.n_options(e)
        col = edge_choices[:, e]
        if col.size and (col.min() < 0 or col.max() >= R):
            raise InvalidInputError(f"edge_choices[:, {e}] must be in [0, {R}), got {int(col.min())}..{int(col.max())}")
    return choices.astype(np.int64), edge_choices.astype(np.int64)


def evaluate(cg, choices, edge_choices=None):
    """Recompute the (memory, time) of strategies from the CostGraph (Eq. 3).

    Parameters
    ----------
    cg : CostGraph
    choices : array_like of int, shape (P, n_nodes) or (n_nodes,)
        Config index of every node.
    edge_choices : array_like of int, shape (P, n_edges), optional
        Option of every edge (default all 0). Picking an absent (+inf) option gives inf.

    Returns
    -------
    memory, time : ndarray of float64, shape (P,)

    Examples
    --------
    >>> cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([[0.0, 1.0]])],
    ...                [(0, 1, np.full((2, 1, 2), 0.5))])
    >>> m, t = evaluate(cg, [[0, 0], [1, 0]])
    >>> m.tolist(), t.tolist()
    ([1.5, 2.5], [3.5, 2.5])
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    choices, edge_choices = _check_choices(cg, choices, edge_choices)
    P = choices.shape[0]
    mem = np.zeros(P)
    tim = np.zeros(P)
    for i, c in enumerate(cg.node_costs):
        mem += c[choices[:, i], 0]
        tim += c[choices[:, i], 1]
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        cost = tab[smap[choices[:, u]], dmap[choices[:, v]], edge_choices[:, e]]
        mem += cost[:, 0]
        tim += cost[:, 1]
    return mem, tim


def content_digest(cg, table_digests):
    """A digest of all that a CostGraph's strategies cost: every node's costs and every edge's
    ends, layout maps and cost table, in order. Two graphs with one digest have the same
    optima and frontier, with the same indices (windows of a model's repeated layers do).

    Parameters
    ----------
    cg : CostGraph
    table_digests : dict
        Digests of the edge cost tables, by the identity of their memory (filled as tables
        are met): a table several edges or graphs share is hashed once. It holds each table
        it has hashed, so that no other array takes that memory while it is kept.

    Returns
    -------
    bytes

    Examples
    --------
    >>> table = np.zeros((2, 2, 2))
    >>> a = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]])] * 2, [(0, 1, table)])
    >>> b = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]])] * 2, [(0, 1, table.copy())])
    >>> content_digest(a, {}) == content_digest(b, {})
    True
    """
    h = hashlib.sha256()
    for c in cg.node_costs:
        h.update(repr(c.shape).encode())
        h.update(np.ascontiguousarray(c).data)
    for u, v, smap, dmap, tab in cg._norm:
        key = table_key(tab)
        if key not in table_digests:
            table_digests[key] = (tab, digest_arrays(tab))
        h.update(repr((u, v, smap.shape[0], dmap.shape[0])).encode())
        h.update(np.ascontiguousarray(smap).data)
        h.update(np.ascontiguousarray(dmap).data)
        h.update(table_digests[key][1])
    return h.digest()


def brute_force_frontier(cg, max_strategies=MAX_BRUTE_FORCE_STRATEGIES):
    """The exact cost frontier by enumerating every strategy (test oracle).

    Parameters
    ----------
    cg : CostGraph
    max_strategies : int
        Refuse (``InvalidInputError``) graphs with more strategies than this.

    Returns
    -------
    TrackedFrontier
        ``method="brute_force"``, exact; ties keep the first strategy in enumeration order.

    Examples
    --------
    >>> cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([[0.0, 1.0], [1.0, 0.0]])],
    ...                [(0, 1, np.zeros((2, 2, 2)))])
    >>> fr = brute_force_frontier(cg)
    >>> fr.memory.tolist(), fr.time.tolist()
    ([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    """
    import time as _time

    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    total = cg.n_strategies()
    if total > max_strategies:
        raise InvalidInputError(
            f"brute force would enumerate {total} strategies, more than max_strategies={max_strategies}"
        )
    t0 = _time.perf_counter()
    radices = list(cg.n_configs) + [cg.n_options(e) for e in range(cg.n_edges)]
    idx = np.indices(radices).reshape(len(radices), -1).T if radices else np.zeros((1, 0), dtype=np.int64)
    choices = idx[:, : cg.n_nodes].astype(np.int64)
    edge_choices = idx[:, cg.n_nodes:].astype(np.int64)
    mem, tim = evaluate(cg, choices, edge_choices)
    ok = np.isfinite(mem) & np.isfinite(tim)
    sel = np.nonzero(ok)[0]
    keep = sel[frontier_indices(mem[sel], tim[sel])]
    return TrackedFrontier(
        memory=mem[keep],
        time=tim[keep],
        choices=choices[keep],
        edge_choices=edge_choices[keep],
        method="brute_force",
        exact=True,
        epsilon=0.0,
        epsilon_depth=0,
        n_heuristic=0,
        n_branch=0,
        seconds=_time.perf_counter() - t0,
    )
