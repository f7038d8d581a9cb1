"""The elimination loop of Frontier Tracking (TensorOpt Alg. 2, lines 4-11).

``simplify`` repeatedly applies, to unmarked nodes, the cheapest exact elimination
available and falls back to branch elimination and then heuristic elimination:

1. a node with no neighbour is *detached* (its reduced union becomes a finished frontier);
2. a node with one neighbour is folded into it (exact, ``K_i x K_j`` work) and a node with
   two neighbours is eliminated (Eq. 4, ``K_h x K_i x K_j`` work). FT-LDP prefers folds,
   FT-Elimination prefers node elimination, as in the paper (on a chain, FT-Elimination
   eliminates the interior nodes and then enumerates the last two). Nodes go in index
   order (usually topological: a model is swept from its input, the frontier so far on one
   small edge), except that a node with two neighbours gives way to a neighbour with two
   neighbours whose elimination creates an edge of fewer cells (``K_h x K_j``), that one to
   its own, and so on while the cells fall: a 51-config node between two 163-config ones
   would make a 163 x 163 table where its neighbour, between two 51-config nodes, makes a
   51 x 51 one. (A greedy order on estimated work loses the sweep: the frontier so far keeps
   a large node as a second dimension, and deep models slow down up to 40x). When the
   chosen node's neighbour h is left with only the node's other neighbour and one-config
   nodes (the model's input, which carries the frontier so far), h goes first with those
   edges merged into its edge to the node, if that is estimated to take fewer pair sums and
   those edges hold no more points per cell than h's edge to the node
   (:func:`~.node_elimination.eliminate_hub_first`): a model's first layer, whose input has
   163 configs where later layers' have 51, then never builds its 163 x 163 table. (A frontier
   so far of many points would be summed into every cell of the node's new edge, where
   products with it prune poorly: on the Transformer's decoder that order measured 2.1 s
   against 0.9 s although estimated 3x cheaper.)
3. with method ``"ldp"``, marked chains are extended after every step (Alg. 2 marking);
4. when stuck: branch elimination (Eq. 6) merges the unmarked node of smallest degree into
   the neighbour giving the smallest config space, unless (``exact=False``) that space
   exceeds ``max_merged_configs``: then heuristic elimination (Eq. 7) fixes the config of the
   unmarked node of largest degree;
5. with ``exact=False``, a node elimination or fold whose estimated work
   (:func:`~.node_elimination.elimination_work`) exceeds ``max_step_work`` is made to fit
   (so is an LDP step, :func:`tensoropt_py.engine.ldp.ldp`): the node keeps only its best
   configs, as many as fit, and is eliminated on them; where fewer than a tenth would fit,
   its config is fixed (heuristic elimination) instead
   (:func:`~.heuristic_elimination.shrink_costly`). On a grid (the zoo RNN: 8 layers x 20
   steps of 413-config cells) the exact order sums frontiers of hundreds or thousands of
   points per config pair, up to 40 s for one step, where fixing the node costs one config's
   worth of work; a WideResNet block's running frontier makes steps of 7 to 20 s, which
   keeping a tenth to three quarters of the node's configs brings to a second or two
   (``benchmarks/bench_scale.py --cases paper16 --paper-uncapped`` measures what the cap
   saves and what it loses).

With ``"ldp"`` the loop ends with every component reduced to its marked chain (run
:func:`tensoropt_py.engine.ldp.ldp` on them); with ``"elimination"`` everything is
detached.
"""

from __future__ import annotations

import heapq

from .branch_elimination import merge_nodes
from .heuristic_elimination import choose_config, fix_node, shrink_costly
from .linear_chain import ChainMarker
from .node_elimination import detach, eliminate_hub_first, eliminate_node, elimination_work, fold_leaf

__all__ = ["simplify"]


def simplify(g, method, exact, max_merged_configs, heuristic, topological_order, marker=None, on_heuristic=None,
             on_step=None, max_step_work=float("inf")):
    """Simplify working graph ``g`` in place; returns the marked chains (``[]`` for elimination).

    ``max_step_work``: with ``exact=False``, the most estimated pair sums
    (:func:`~.node_elimination.elimination_work`) a node elimination or fold may take; a
    costlier one drops configs of the node or fixes it (:func:`~.heuristic_elimination.shrink_costly`).

    ``marker``: resume with this chain marking (of ``g``) instead of a fresh one.
    ``on_heuristic(g, marker)``: called once, just before the first heuristic elimination
    (``heuristic="auto"`` snapshots the state there and later resumes the snapshot with
    the other heuristic instead of re-running everything); a restriction for the work cap
    chooses no config by the heuristic and does not call it.
    ``on_step(g)``: called after every elimination step (progress reporting).
    """
    ldp = method == "ldp"
    if ldp and marker is None:
        marker = ChainMarker(g, topological_order)
    marked = marker.marked if ldp else set()
    # lazily-validated priority queues
    cand: list = []  # (prio, id, degree) for degree <= 2
    mindeg: list = []  # (degree, K, id)
    maxdeg: list = []  # (-degree, id)
    prio_of = {0: 0, 1: 1, 2: 2} if ldp else {0: 0, 2: 1, 1: 2}

    def touch_all():
        for x in g.touched:
            if x in g.nodes and x not in marked:
                d = g.degree(x)
                if d <= 2:
                    heapq.heappush(cand, (prio_of[d], x, d))
                heapq.heappush(mindeg, (d, g.nodes[x].K, x))
                heapq.heappush(maxdeg, (-d, x))
        g.touched.clear()

    pending = [on_heuristic]  # the hook, until the first heuristic elimination calls it

    def first_heuristic():
        if pending[0] is not None:
            hook, pending[0] = pending[0], None
            hook(g, marker)

    def valid(x, d=None, K=None):
        if x not in g.nodes or x in marked:
            return False
        if d is not None and g.degree(x) != d:
            return False
        if K is not None and g.nodes[x].K != K:
            return False
        return True

    g.touched.update(g.nodes)
    while True:
        if on_step is not None:
            on_step(g)
        if ldp:
            marker.extend()
        touch_all()
        x = None
        while cand:
            _, y, d = heapq.heappop(cand)
            if valid(y, d):
                x = y
                break
        if x is not None:
            d = g.degree(x)
            if d == 2:
                y = _downhill(g, x, marked)
                if y != x:
                    heapq.heappush(cand, (prio_of[d], x, d))  # still a candidate
                    x = y
                h = _hub_first(g, x, marked)
                if h is not None and (exact or elimination_work(g, h) <= max_step_work):
                    eliminate_hub_first(g, x, h)
                    continue
            if d > 0 and not exact and elimination_work(g, x) > max_step_work:
                if shrink_costly(g, x, heuristic, max_step_work, before_fix=first_heuristic):
                    continue  # fixed: gone (else restricted to configs that fit: eliminated below)
            if d == 0:
                detach(g, x)
            elif d == 1:
                fold_leaf(g, x)
            else:
                eliminate_node(g, x)
            continue
        # stuck: branch elimination of the smallest-degree unmarked node
        x = None
        while mindeg:
            d, K, y = mindeg[0]
            if valid(y, d, K):
                x = y
                break
            heapq.heappop(mindeg)
        if x is None:
            break  # no unmarked node left
        Kx = g.nodes[x].K
        best = None
        for w in g.adj[x]:
            key = (w in marked, Kx * g.nodes[w].K, w)
            if best is None or key < best:
                best = key
        if exact or best[1] <= max_merged_configs:
            merge_nodes(g, x, best[2])
            continue
        # heuristic elimination of the largest-degree unmarked node
        first_heuristic()
        z = None
        while maxdeg:
            nd, y = heapq.heappop(maxdeg)
            if valid(y, -nd):
                z = y
                break
        assert z is not None
        fix_node(g, z, choose_config(g, z, heuristic))
    return marker.chains if ldp else []


def _cells_after(g, x):
    """Cells of the edge that eliminating degree-2 node ``x`` creates."""
    h, j = g.adj[x]
    return g.nodes[h].K * g.nodes[j].K


def _downhill(g, x, marked):
    """The degree-2 node to eliminate instead of degree-2 node ``x``: from ``x``, step to the
    unmarked degree-2 neighbour whose elimination creates the edge of fewest cells, while that
    is fewer than the current node's (``x`` itself when no neighbour's is)."""
    cells = _cells_after(g, x)
    while True:
        best = None
        for y in g.adj[x]:
            if y not in marked and g.degree(y) == 2:
                c = _cells_after(g, y)
                if c < cells:
                    best, cells = y, c
        if best is None:
            return x
        x = best


def _hub_first(g, x, marked):
    """The neighbour ``h`` of degree-2 node ``x`` to eliminate before ``x``
    (:func:`~.node_elimination.eliminate_hub_first`), or None: ``h`` is unmarked, its other
    neighbours are ``x``'s other neighbour and one-config nodes, whose edges hold no more
    points per cell than its edge to ``x``, and its elimination with those edges summed in is
    estimated to take fewer pair sums than ``x``'s."""
    best, work = None, elimination_work(g, x)
    for h in g.adj[x]:
        if h in marked:
            continue
        others = [y for y in g.adj[h] if y != x]
        extra = [y for y in others if y not in g.adj[x]]
        if len(others) - len(extra) != 1 or not extra or any(g.nodes[y].K != 1 for y in extra):
            continue
        if _points_per_cell(g, h, extra) > _points_per_cell(g, h, [x]):
            continue
        w = elimination_work(g, h)  # the one-config neighbours count as factors of h
        if w < work:
            best, work = h, w
    return best


def _points_per_cell(g, h, others):
    """Product over the edges from ``h`` to ``others`` of their mean points per cell."""
    p = 1.0
    for y in others:
        tab = g.adj[h][y].table
        p *= tab.n_points / max(tab.n_cells, 1)
    return p
