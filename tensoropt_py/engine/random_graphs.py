"""Random cost graphs for tests and benchmarks.

Costs are in realistic ranges (memory ~1e6..1e9 bytes, time ~1e-4..1e-1 s) and every
node trades memory for time across its configs, so frontiers are non-trivial. With
``integer_costs=True`` costs are small integers times ``1e6`` bytes and ``2**-10`` s:
sums are exact in float64, so equal-cost strategies tie exactly (what brute-force
comparisons need).

With ``layouts=A`` every node gets an output-layout and an input-layout class per config
(``A`` classes each, every class used) and edges are :class:`LayoutEdge` tables over
layout pairs: same layout is cheap, a different one costs a rescheduling.
"""

from __future__ import annotations

import numpy as np

from .._random import as_generator
from ..errors import InvalidInputError
from ..units import parse_count
from .cost_graph import CostGraph, LayoutEdge
from .peak import IntervalUsage

__all__ = [
    "random_chain",
    "random_layered_dag",
    "random_small_dag",
    "random_cyclic_graph",
    "random_sparse_cyclic_graph",
    "random_interval_usage",
    "random_repeated_blocks",
]


def _check_fraction(name, x, below_one=False):
    """``x`` in [0, 1] (in [0, 1) with ``below_one``), or a clear error."""
    if below_one and not 0 <= x < 1:
        raise InvalidInputError(f"{name} must be in [0, 1), got {x!r}")
    if not 0 <= x <= 1:
        raise InvalidInputError(f"{name} must be in [0, 1], got {x!r}")
    return x


def _node_costs(rng, k, integer):
    if integer:
        x = rng.integers(0, 9, size=k)
        mem = (x + rng.integers(0, 4, size=k)) * 1e6
        tim = (8 - x + rng.integers(0, 4, size=k)) * 2.0**-10
        return np.stack([mem, tim], axis=1).astype(np.float64)
    M = 10 ** rng.uniform(6, 9)
    T = 10 ** rng.uniform(-4, -1)
    x = rng.uniform(0, 1, size=k)
    mem = M * (0.05 + 0.95 * x) * rng.uniform(0.8, 1.2, size=k)
    tim = T * (0.05 + 0.95 * (1 - x)) * rng.uniform(0.8, 1.2, size=k)
    return np.stack([mem, tim], axis=1)


def _pair_table(rng, A, B, R, integer, inf_prob=0.0, diagonal_cheap=True):
    """(A, B, R, 2) costs of rescheduling between layout classes, R tensor-reuse options."""
    if integer:
        base_m = rng.integers(0, 4, size=(A, B)).astype(float) * 1e6
        base_t = rng.integers(0, 6, size=(A, B)).astype(float) * 2.0**-10
    else:
        Me = 10 ** rng.uniform(5, 8)
        Te = 10 ** rng.uniform(-5, -2)
        base_m = Me * rng.uniform(0.0, 0.3, size=(A, B))
        base_t = Te * rng.uniform(0.2, 1.0, size=(A, B))
    if diagonal_cheap:
        d = np.arange(min(A, B))
        base_m[d, d] *= 0.1 if not integer else 0
        base_t[d, d] *= 0.05 if not integer else 0
    tab = np.empty((A, B, R, 2))
    tab[:, :, 0, 0] = base_m
    tab[:, :, 0, 1] = base_t
    for r in range(1, R):
        if integer:
            tab[:, :, r, 0] = base_m + rng.integers(-2, 3, size=(A, B)) * 1e6
            tab[:, :, r, 1] = base_t + rng.integers(-2, 3, size=(A, B)) * 2.0**-10
            tab[:, :, r] = np.maximum(tab[:, :, r], 0)
        else:  # tensor reuse: keep more memory, spend less time (or the reverse)
            f = rng.uniform(0.3, 3.0, size=(A, B))
            tab[:, :, r, 0] = base_m * f + (10 ** rng.uniform(5, 7)) * (f > 1)
            tab[:, :, r, 1] = base_t / f
    if R > 1 and inf_prob > 0:
        absent = rng.uniform(size=(A, B, R)) < inf_prob
        keep = rng.integers(0, R, size=(A, B))
        absent[np.arange(A)[:, None], np.arange(B)[None, :], keep] = False
        tab[absent] = np.inf
    return tab


def _layout_classes(rng, k, A):
    return rng.permutation(np.arange(k) % A)


class _Builder:
    def __init__(self, rng, layouts, options, integer, inf_prob=0.1):
        self.rng = rng
        self.layouts = layouts
        self.options = options
        self.integer = integer
        self.inf_prob = inf_prob
        self.nodes = []
        self.out_l = []
        self.in_l = []
        self.edges = []

    def node(self, k):
        self.nodes.append(_node_costs(self.rng, k, self.integer))
        if self.layouts:
            A = min(self.layouts, k)
            self.out_l.append(_layout_classes(self.rng, k, A))
            self.in_l.append(_layout_classes(self.rng, k, A))
        return len(self.nodes) - 1

    def edge(self, u, v, layout=None, options=None):
        R = self.options if options is None else options
        layout = bool(self.layouts) if layout is None else layout
        Ku, Kv = self.nodes[u].shape[0], self.nodes[v].shape[0]
        if layout:
            if self.out_l and len(self.out_l) > max(u, v):
                src, dst = self.out_l[u], self.in_l[v]
            else:
                A = self.rng.integers(1, Ku + 1)
                B = self.rng.integers(1, Kv + 1)
                src, dst = _layout_classes(self.rng, Ku, A), _layout_classes(self.rng, Kv, B)
            A, B = int(src.max()) + 1, int(dst.max()) + 1
            tab = _pair_table(self.rng, A, B, R, self.integer, self.inf_prob)
            cost = LayoutEdge(src, dst, tab if R > 1 else tab[:, :, 0])
        else:
            tab = _pair_table(self.rng, Ku, Kv, R, self.integer, self.inf_prob, diagonal_cheap=Ku == Kv)
            cost = tab if R > 1 else tab[:, :, 0]
        self.edges.append((u, v, cost))

    def build(self):
        return CostGraph(self.nodes, self.edges)


def random_chain(n, k, layouts=None, options=1, seed=None, integer_costs=False):
    """A linear chain 0 -> 1 -> ... -> n-1 with ``k`` configs per node.

    Parameters
    ----------
    n : int >= 1
    k : int >= 1
        Configs per node.
    layouts : int or None
        None: dense ``(k, k, ...)`` edges; A: :class:`LayoutEdge` over A layout classes.
    options : int >= 1
        R options per config pair (some +inf when R > 1).
    seed : None, int or Generator
    integer_costs : bool
        Exact-in-float integer costs (for brute-force comparisons).

    Examples
    --------
    >>> cg = random_chain(5, 4, layouts=2, seed=0)
    >>> str(cg)
    'CostGraph(nodes=5, edges=4, K<=4)'
    """
    n = parse_count(n, "n")
    k = parse_count(k, "k")
    options = parse_count(options, "options")
    if layouts is not None:
        layouts = parse_count(layouts, "layouts")
    b = _Builder(as_generator(seed), layouts, options, integer_costs)
    for _ in range(n):
        b.node(k)
    for i in range(n - 1):
        b.edge(i, i + 1)
    return b.build()


def random_repeated_blocks(n_blocks, k=3, side=False, options=2, seed=None, integer_costs=False):
    """A chain of identical blocks, as a model repeats its layers: every block has the same
    node cost arrays and edge tables (the same objects) on other nodes.

    A block is a chain of three ``k``-config nodes; with ``side``, a 2-config node hangs off
    its middle one. Each block's last node links to the next block's first by one shared
    table with ``options`` options per config pair.

    Parameters
    ----------
    n_blocks : int >= 1
    k : int >= 1
        Configs of the chain's nodes.
    side : bool
        Hang a 2-config node off the middle of every block.
    options : int >= 1
        R options per config pair of the links between blocks.
    seed : None, int or Generator
    integer_costs : bool
        Exact-in-float integer costs (for brute-force comparisons).

    Examples
    --------
    >>> cg = random_repeated_blocks(4, side=True, seed=0)
    >>> str(cg), cg.n_options(6)  # edge 6: the link from block 0 to block 1
    ('CostGraph(nodes=16, edges=15, K<=3)', 2)
    >>> cg.edges[0][2] is cg.edges[3][2]  # the first edge of blocks 0 and 1: one table
    True
    """
    n_blocks = parse_count(n_blocks, "n_blocks")
    k = parse_count(k, "k")
    options = parse_count(options, "options")
    rng = as_generator(seed)
    chain = [_node_costs(rng, k, integer_costs) for _ in range(3)]
    inner = [_pair_table(rng, k, k, 1, integer_costs)[:, :, 0] for _ in range(2)]
    link = _pair_table(rng, k, k, options, integer_costs)
    hanging = (_node_costs(rng, 2, integer_costs), _pair_table(rng, k, 2, 1, integer_costs, diagonal_cheap=False)[:, :, 0])
    size = 4 if side else 3
    nodes, edges = [], []
    for b in range(n_blocks):
        first = size * b
        nodes += chain + ([hanging[0]] if side else [])
        edges += [(first, first + 1, inner[0]), (first + 1, first + 2, inner[1])]
        if side:
            edges.append((first + 1, first + 3, hanging[1]))
        if b:
            edges.append((first - size + 2, first, link))
    return CostGraph(nodes, edges)


def random_layered_dag(n_layers, width, k, layouts=None, options=1, skip_prob=0.2, seed=None, integer_costs=False):
    """A layered DAG: a source, then ``n_layers - 1`` layers of ``width`` nodes.

    Every node takes an input from a random node of the previous layer, a second one
    with probability 1/2, and with probability ``skip_prob`` a skip (residual) edge from
    a random node 2 to 4 layers back (skip edges and wide layers force
    branch/heuristic elimination).

    Examples
    --------
    >>> cg = random_layered_dag(4, 2, 3, seed=1)
    >>> cg.n_nodes
    7
    """
    n_layers = parse_count(n_layers, "n_layers")
    width = parse_count(width, "width")
    k = parse_count(k, "k")
    options = parse_count(options, "options")
    if layouts is not None:
        layouts = parse_count(layouts, "layouts")
    _check_fraction("skip_prob", skip_prob)
    rng = as_generator(seed)
    b = _Builder(rng, layouts, options, integer_costs)
    layers = [[b.node(k)]]
    for _ in range(1, n_layers):
        layer = []
        for _ in range(width):
            v = b.node(k)
            prev = layers[-1]
            srcs = {int(rng.choice(prev))}
            if len(prev) > 1 and rng.uniform() < 0.5:
                srcs.add(int(rng.choice(prev)))
            if len(layers) >= 2 and rng.uniform() < skip_prob:
                back = int(rng.integers(2, min(4, len(layers)) + 1))
                srcs.add(int(rng.choice(layers[-back])))
            for u in sorted(srcs):
                b.edge(u, v)
            layer.append(v)
        layers.append(layer)
    return b.build()


def random_small_dag(n_nodes=None, max_k=4, edge_prob=0.35, multi_edge_prob=0.15, layout_prob=0.3,
                     max_options=3, inf_prob=0.25, seed=None, integer_costs=True):
    """A small random DAG exercising every feature (for brute-force tests).

    Random topological order, possibly several components and isolated nodes, K from 1
    to ``max_k``, multi-edges, dense or :class:`LayoutEdge` edges with 1 to
    ``max_options`` options (some +inf, never all of a pair).

    Examples
    --------
    >>> cg = random_small_dag(5, seed=3)
    >>> cg.n_nodes
    5
    """
    rng = as_generator(seed)
    if n_nodes is None:
        n_nodes = int(rng.integers(1, 8))
    n_nodes = parse_count(n_nodes, "n_nodes")
    max_k = parse_count(max_k, "max_k")
    max_options = parse_count(max_options, "max_options")
    b = _Builder(rng, None, 1, integer_costs, inf_prob)
    for _ in range(n_nodes):
        b.node(int(rng.integers(1, max_k + 1)))
    perm = rng.permutation(n_nodes)
    for a in range(n_nodes):
        for c in range(a + 1, n_nodes):
            if rng.uniform() < edge_prob:
                u, v = int(perm[a]), int(perm[c])
                reps = 2 if rng.uniform() < multi_edge_prob else 1
                for _ in range(reps):
                    b.edge(u, v, layout=bool(rng.uniform() < layout_prob),
                           options=int(rng.integers(1, max_options + 1)))
    return b.build()


def random_cyclic_graph(n_nodes=None, max_k=3, edge_prob=0.45, forbidden_prob=0.0, max_options=2,
                        seed=None, integer_costs=True):
    """A small random undirected-style cost graph whose edges close cycles (brute-force tests).

    Edges join random node pairs in random directions (so the directed edges usually form
    cycles), with dense or :class:`LayoutEdge` tables and 1 to ``max_options`` options;
    a ring through every node guarantees at least one cycle when ``n_nodes >= 3``. With
    ``forbidden_prob > 0`` that fraction of node configs and of edge entries gets the
    sentinel cost ``1e18`` (a forbidden config / combination; config 0 of every node
    stays allowed).

    Parameters
    ----------
    n_nodes : int >= 1 or None
        None: random in 3..7.
    max_k : int >= 1
        Configs per node drawn from 1..max_k.
    edge_prob : float in [0, 1]
        Probability of an extra edge per node pair (besides the ring).
    forbidden_prob : float in [0, 1)
        Probability that a node config or an edge entry is forbidden (1e18).
    max_options : int >= 1
    seed : None, int or Generator
    integer_costs : bool

    Examples
    --------
    >>> cg = random_cyclic_graph(4, seed=0)
    >>> cg.acyclic
    False
    """
    rng = as_generator(seed)
    if n_nodes is None:
        n_nodes = int(rng.integers(3, 8))
    n_nodes = parse_count(n_nodes, "n_nodes")
    max_k = parse_count(max_k, "max_k")
    max_options = parse_count(max_options, "max_options")
    _check_fraction("edge_prob", edge_prob)
    _check_fraction("forbidden_prob", forbidden_prob, below_one=True)
    b = _Builder(rng, None, 1, integer_costs, 0.2)
    for _ in range(n_nodes):
        b.node(int(rng.integers(1, max_k + 1)))
    pairs = [(i, (i + 1) % n_nodes) for i in range(n_nodes)] if n_nodes >= 3 else []
    for a in range(n_nodes):
        for c in range(a + 1, n_nodes):
            if rng.uniform() < edge_prob:
                pairs.append((c, a) if rng.uniform() < 0.5 else (a, c))
    for u, v in pairs:
        b.edge(u, v, layout=bool(rng.uniform() < 0.3), options=int(rng.integers(1, max_options + 1)))
    if forbidden_prob > 0:
        _sentinels(b, rng, forbidden_prob)
    return b.build()


def _sentinels(b, rng, forbidden_prob):
    """Set the cost 1e18 on that fraction of node configs (never config 0) and edge entries."""
    for c in b.nodes:
        bad = rng.uniform(size=c.shape[0]) < forbidden_prob
        bad[0] = False
        c[bad, int(rng.integers(0, 2))] = 1e18
    edges = []
    for u, v, cost in b.edges:
        if isinstance(cost, LayoutEdge):
            tab = np.array(cost.table)
            tab[rng.uniform(size=tab.shape[:-1]) < forbidden_prob, int(rng.integers(0, 2))] = 1e18
            cost = LayoutEdge(cost.src_layout, cost.dst_layout, tab)
        else:
            cost = np.array(cost)
            cost[rng.uniform(size=cost.shape[:-1]) < forbidden_prob, int(rng.integers(0, 2))] = 1e18
        edges.append((u, v, cost))
    b.edges = edges


def random_sparse_cyclic_graph(n_nodes, k, chord_prob=0.5, window=4, forbidden_prob=0.0, seed=None,
                               integer_costs=False):
    """A large sparse cost graph with many cycles of bounded width (scale benchmarks).

    A ring through every node plus, for each node ``i``, with probability ``chord_prob``
    a chord to node ``i + d`` (``d`` in 2..``window``, modulo ``n_nodes``) in a random
    direction: every cycle stays local, so exact elimination stays narrow (the shape of
    DNN sharding graphs, unlike uniform random graphs). Edges are dense ``(k, k)``
    tables with one option; with ``forbidden_prob > 0`` that fraction of node configs
    (config 0 excepted) and of edge entries gets the sentinel cost ``1e18``.

    Parameters
    ----------
    n_nodes : int >= 3
    k : int >= 1
        Configs per node.
    chord_prob : float in [0, 1]
    window : int >= 2
        Longest chord (in ring positions).
    forbidden_prob : float in [0, 1)
    seed : None, int or Generator
    integer_costs : bool
        Exact-in-float integer costs (for brute-force comparisons).

    Examples
    --------
    >>> cg = random_sparse_cyclic_graph(50, 3, seed=0)
    >>> cg.n_nodes, cg.acyclic
    (50, False)
    """
    n_nodes = parse_count(n_nodes, "n_nodes", least=3)
    k = parse_count(k, "k")
    window = parse_count(window, "window", least=2)
    _check_fraction("chord_prob", chord_prob)
    _check_fraction("forbidden_prob", forbidden_prob, below_one=True)
    rng = as_generator(seed)
    b = _Builder(rng, None, 1, integer_costs)
    for _ in range(n_nodes):
        b.node(k)
    for i in range(n_nodes):
        b.edge(i, (i + 1) % n_nodes)
    for i in range(n_nodes):
        if rng.uniform() < chord_prob:
            j = (i + int(rng.integers(2, window + 1))) % n_nodes
            if j != i:
                b.edge(*((i, j) if rng.uniform() < 0.5 else (j, i)))
    if forbidden_prob > 0:
        _sentinels(b, rng, forbidden_prob)
    return b.build()


def random_interval_usage(cg, max_span=8, horizon=None, empty_prob=0.0, seed=None):
    """Random live intervals for the nodes of ``cg``, using each config's memory as its usage.

    Node ``i`` starts at a random step of ``[0, horizon)`` and lives for 1 to ``max_span``
    steps (with probability ``empty_prob`` it is never live). Its usage per config is the
    CostGraph's memory of that config (so usage trades against time as memory does), and a
    random multiple of 1e6 bytes for a forbidden config.

    Parameters
    ----------
    cg : CostGraph
    max_span : int >= 1
        Longest live interval (steps).
    horizon : int >= 1 or None
        Number of possible start steps; None: the number of nodes.
    empty_prob : float in [0, 1]
        Probability that a node is never live.
    seed : None, int or Generator

    Returns
    -------
    IntervalUsage

    Examples
    --------
    >>> cg = random_cyclic_graph(5, seed=0)
    >>> u = random_interval_usage(cg, seed=0)
    >>> u.n_nodes
    5
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    max_span = parse_count(max_span, "max_span")
    horizon = cg.n_nodes if horizon is None else parse_count(horizon, "horizon")
    _check_fraction("empty_prob", empty_prob)
    rng = as_generator(seed)
    n = cg.n_nodes
    start = rng.integers(0, horizon, size=n)
    span = rng.integers(1, max_span + 1, size=n)
    span[rng.uniform(size=n) < empty_prob] = 0
    usage = []
    for c in cg.node_costs:
        mem = np.array(c[:, 0])
        bad = ~np.isfinite(mem)
        mem[bad] = rng.integers(0, 9, size=int(bad.sum())) * 1e6
        usage.append(mem)
    return IntervalUsage(start, start + span, tuple(usage))
