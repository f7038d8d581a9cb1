"""Each elimination on its own: exactness against brute force, layout exploitation, marking."""

import numpy as np
import pytest

from tensoropt_py.elimination.branch_elimination import merge_nodes
from tensoropt_py.elimination.driver import simplify
from tensoropt_py.elimination.heuristic_elimination import (
    MIN_KEPT_SHARE,
    _layer_order,
    choose_config,
    fix_node,
    rank_configs,
    restrict_node,
    shrink_costly,
)
from tensoropt_py.elimination.linear_chain import ChainMarker
from tensoropt_py.elimination.node_elimination import (
    detach,
    eliminate_hub_first,
    eliminate_node,
    elimination_work,
    fold_leaf,
)
from tensoropt_py.engine import CostGraph, LayoutEdge, brute_force_frontier, evaluate, track
from tensoropt_py.engine.ldp import ldp
from tensoropt_py.engine.random_graphs import random_chain, random_small_dag
from tensoropt_py.engine.screen import restrict
from tensoropt_py.engine.track import build_working_graph, finish


def int_nodes(rng, ks):
    return [np.stack([rng.integers(0, 9, k) * 1.0, rng.integers(0, 9, k) * 1.0], axis=1) for k in ks]


def int_edge(rng, ku, kv, R=1):
    c = rng.integers(0, 5, size=(ku, kv, R, 2)).astype(float)
    if R > 1:
        c[:, :, 1:][rng.uniform(size=(ku, kv, R - 1, 2)) < 0.2] = np.inf
    return c if R > 1 else c[:, :, 0]


def int_layout(rng, ku, kv, A, B, R=1):
    tab = rng.integers(0, 5, size=(A, B, R, 2)).astype(float)
    return LayoutEdge(rng.permutation(np.arange(ku) % A), rng.permutation(np.arange(kv) % B), tab if R > 1 else tab[:, :, 0])


def finish_exact(cg, g):
    """Eliminate whatever is left exactly and compare with brute force."""
    simplify(g, "elimination", True, 10**9, "min_memory", cg.topological_order)
    final, ch, ech = finish(g, cg.n_nodes, cg.n_edges)
    bf = brute_force_frontier(cg)
    assert final.n_points == len(bf)
    np.testing.assert_allclose(final.mem, bf.memory, rtol=1e-12)
    np.testing.assert_allclose(final.time, bf.time, rtol=1e-12)
    m, t = evaluate(cg, ch, ech)
    np.testing.assert_allclose(m, final.mem, rtol=1e-12)
    np.testing.assert_allclose(t, final.time, rtol=1e-12)
    return g


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("layout", [False, True])
def test_node_elimination_is_exact(seed, layout):
    rng = np.random.default_rng(seed)
    ks = [3, 4, 3]
    nodes = int_nodes(rng, ks)
    mk = (lambda u, v: int_layout(rng, ks[u], ks[v], 2, 2, R=2)) if layout else (lambda u, v: int_edge(rng, ks[u], ks[v], R=2))
    cg = CostGraph(nodes, [(0, 1, mk(0, 1)), (1, 2, mk(1, 2))])
    g = build_working_graph(cg)
    eliminate_node(g, 1)
    assert set(g.adj[0]) == {2} and g.stats["node"] == 1
    finish_exact(cg, g)


def hub_triangle(rng, carriers=1, layout=False, j_to_carrier=False, carrier_options=1):
    """Node 1 between hub 0 and node 2, the hub also joined to node 2 and to one-config
    carriers 3, 4, ... (edges of ``carrier_options`` options), and the carriers to a last node
    of two configs, which keeps them from being eliminated first."""
    ks = [4, 3, 4] + [1] * carriers + [2]
    nodes = int_nodes(rng, ks)
    mk = (lambda u, v: int_layout(rng, ks[u], ks[v], 2, 2, R=3)) if layout else (lambda u, v: int_edge(rng, ks[u], ks[v], R=3))
    edges = [(0, 1, mk(0, 1)), (1, 2, mk(1, 2)), (0, 2, int_edge(rng, 4, 4, R=2))]
    last = len(ks) - 1
    for c in range(3, 3 + carriers):
        # every option on the cell's frontier: a carrier edge of carrier_options points per cell
        steps = np.arange(carrier_options, dtype=float)
        carry = rng.integers(0, 5, size=(1, 4, 1, 2)) + np.stack([steps, steps[::-1]], axis=-1)
        edges += [(c, 0, carry if carrier_options > 1 else carry[:, :, 0]), (c, last, int_edge(rng, 1, 2))]
    if j_to_carrier:
        edges.append((2, 3, int_edge(rng, 4, 1, R=2)))
    return CostGraph(nodes, edges)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("carriers, layout, j_to_carrier", [(1, False, False), (1, True, True), (2, False, True)])
def test_hub_first_elimination_is_exact(seed, carriers, layout, j_to_carrier):
    cg = hub_triangle(np.random.default_rng(seed), carriers, layout, j_to_carrier)
    g = build_working_graph(cg)
    eliminate_hub_first(g, 1, 0)
    # both gone; what they summed rides on an edge from node 2 to the first carrier
    assert 0 not in g.nodes and 1 not in g.nodes and 3 in g.adj[2]
    assert all(3 + c in g.nodes and 0 not in g.adj[3 + c] for c in range(carriers))
    assert g.stats["hub_first"] == 1
    finish_exact(cg, g)


def test_the_driver_eliminates_the_hub_first_where_it_costs_less():
    # the hub's carrier edge holds one point per cell, its node's edges three: the hub is cheaper
    cg = hub_triangle(np.random.default_rng(0))
    g = build_working_graph(cg)
    assert elimination_work(g, 0) < elimination_work(g, 1)
    finish_exact(cg, g)
    assert g.stats["hub_first"] == 1
    # a carrier edge of more points per cell than the node's edge to the hub (a running
    # frontier) keeps the plain order, whatever the estimate says
    cg = hub_triangle(np.random.default_rng(0), carrier_options=6)
    g = build_working_graph(cg)
    finish_exact(cg, g)
    assert g.stats["hub_first"] == 0


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("carriers, j_to_carrier", [(1, False), (1, True), (2, True)])
def test_track_with_the_hub_first_is_exact(seed, carriers, j_to_carrier):
    # the whole tracking (FT-Elimination down to the last nodes, unrolled) over graphs where
    # the rule applies
    cg = hub_triangle(np.random.default_rng(seed), carriers=carriers, j_to_carrier=j_to_carrier)
    fr = track(cg, method="elimination", exact=True, epsilon=0.0)
    bf = brute_force_frontier(cg)
    assert fr.stats["hub_first"] == 1
    np.testing.assert_allclose(fr.memory, bf.memory, rtol=1e-12)
    np.testing.assert_allclose(fr.time, bf.time, rtol=1e-12)
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_edge_elimination_merges_parallel_edges(seed):
    rng = np.random.default_rng(seed)
    ks = [4, 3]
    nodes = int_nodes(rng, ks)
    edges = [(0, 1, int_edge(rng, 4, 3, R=3)), (0, 1, int_layout(rng, 4, 3, 2, 2, R=2)), (0, 1, int_layout(rng, 4, 3, 2, 3))]
    cg = CostGraph(nodes, edges)
    g = build_working_graph(cg)
    assert g.stats["edge"] == 2 and len(g.adj[0]) == 1
    finish_exact(cg, g)


def test_reverse_orientation_edges_are_merged():
    """Node elimination can create h->j while j->h exists: orientation must be handled."""
    rng = np.random.default_rng(3)
    ks = [2, 3, 4]
    nodes = int_nodes(rng, ks)
    cg = CostGraph(nodes, [(2, 1, int_edge(rng, 4, 3)), (1, 0, int_edge(rng, 3, 2)), (2, 0, int_layout(rng, 4, 2, 2, 2))])
    g = build_working_graph(cg)
    eliminate_node(g, 1)  # creates 0-2 (h=0 -> j=2) next to the existing 2->0
    assert g.stats["edge"] == 1
    finish_exact(cg, g)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("adjacent", [True, False])
def test_branch_elimination_is_exact(seed, adjacent):
    rng = np.random.default_rng(seed)
    ks = [2, 3, 2, 3]
    nodes = int_nodes(rng, ks)
    edges = [(0, 1, int_edge(rng, 2, 3)), (0, 2, int_layout(rng, 2, 2, 2, 1, R=2)), (1, 3, int_edge(rng, 3, 3)),
             (2, 3, int_edge(rng, 2, 3, R=2))]
    if adjacent:
        edges.append((1, 2, int_edge(rng, 3, 2)))
    cg = CostGraph(nodes, edges)
    g = build_working_graph(cg)
    merge_nodes(g, 1, 2)
    assert g.nodes[2].K == 6 and 1 not in g.nodes
    assert set(g.adj[2]) == {0, 3}
    finish_exact(cg, g)


def test_leaf_fold_and_detach_are_exact_and_exploit_layouts():
    rng = np.random.default_rng(0)
    ks = [8, 8]
    nodes = int_nodes(rng, ks)
    cg = CostGraph(nodes, [(0, 1, int_layout(rng, 8, 8, 2, 4, R=2))])
    g = build_working_graph(cg)
    fold_leaf(g, 0)
    n1 = g.nodes[1]
    # lazy per-layout factor: one cell per destination layout class, not per config
    assert len(n1.factors) == 2 and n1.factors[1][0].n_cells == 4
    detach(g, 1)
    final, ch, ech = finish(g, 2, 1)
    bf = brute_force_frontier(cg)
    np.testing.assert_allclose(final.mem, bf.memory)
    np.testing.assert_allclose(final.time, bf.time)


def test_layout_edges_do_less_work_than_dense_ones():
    cg_l = random_chain(20, 32, layouts=4, seed=1, integer_costs=True)
    dense_edges = [(u, v, e.dense()) for u, v, e in cg_l.edges]
    cg_d = CostGraph(cg_l.node_costs, dense_edges)
    from tensoropt_py.engine import track

    a = track(cg_l, exact=True)
    b = track(cg_d, exact=True)
    np.testing.assert_array_equal(a.memory, b.memory)
    np.testing.assert_array_equal(a.time, b.time)
    assert a.stats["terms"] * 4 < b.stats["terms"]


@pytest.mark.parametrize("heuristic", ["min_memory", "weighted"])
def test_heuristic_elimination_is_achievable(heuristic):
    rng = np.random.default_rng(5)
    ks = [3, 4, 3, 2]
    nodes = int_nodes(rng, ks)
    edges = [(0, 1, int_edge(rng, 3, 4)), (0, 2, int_edge(rng, 3, 3, R=2)), (0, 3, int_layout(rng, 3, 2, 2, 2)),
             (1, 2, int_edge(rng, 4, 3)), (2, 3, int_edge(rng, 3, 2))]
    cg = CostGraph(nodes, edges)
    g = build_working_graph(cg)
    k = choose_config(g, 0, heuristic)
    if heuristic == "min_memory":
        mem = nodes[0][:, 0]
        assert mem[k] == mem.min()
    fix_node(g, 0, k)
    assert g.stats["heuristic"] == 1 and 0 not in g.nodes
    simplify(g, "elimination", True, 10**9, heuristic, cg.topological_order)
    final, ch, ech = finish(g, 4, 5)
    assert np.all(ch[:, 0] == k)
    m, t = evaluate(cg, ch, ech)
    np.testing.assert_allclose(m, final.mem)
    np.testing.assert_allclose(t, final.time)
    # it is the exact frontier of the strategies with node 0 fixed to k
    full = brute_force_frontier(CostGraph([nodes[0][k:k + 1]] + nodes[1:],
                                          [(u, v, _restrict(e, u, v, k)) for u, v, e in cg.edges]))
    np.testing.assert_allclose(final.mem, full.memory)
    np.testing.assert_allclose(final.time, full.time)


def _mixed_graph(seed):
    """Four nodes, dense, multi-option and layout edges, a cycle (branch eliminations)."""
    rng = np.random.default_rng(seed)
    ks = [5, 4, 3, 3]
    nodes = int_nodes(rng, ks)
    edges = [(0, 1, int_edge(rng, 5, 4)), (0, 2, int_edge(rng, 5, 3, R=2)), (0, 3, int_layout(rng, 5, 3, 2, 2)),
             (1, 2, int_edge(rng, 4, 3)), (2, 3, int_edge(rng, 3, 3))]
    return CostGraph(nodes, edges)


def _finish_exactly(cg, g):
    simplify(g, "elimination", True, 10**9, "min_memory", cg.topological_order)
    return finish(g, cg.n_nodes, cg.n_edges)


@pytest.mark.parametrize("seed", range(4))
def test_restricting_a_node_tracks_exactly_the_strategies_of_its_kept_configs(seed):
    cg = _mixed_graph(seed)
    g = build_working_graph(cg)
    h = g.snapshot()  # shares the edges: restricting g must leave it whole
    for tab in g.ctx.tables:  # as the "auto" fork does: neither copy releases what the other needs
        tab.pinned = True
    keep = [4, 1, 2]
    restrict_node(g, 0, keep)
    assert g.nodes[0].K == 3
    final, ch, ech = _finish_exactly(cg, g)
    assert set(ch[:, 0]) <= set(keep)  # original config numbers
    m, t = evaluate(cg, ch, ech)
    np.testing.assert_allclose(m, final.mem)
    np.testing.assert_allclose(t, final.time)
    truth = brute_force_frontier(restrict(cg, [np.array(sorted(keep))] + [np.arange(k) for k in cg.n_configs[1:]]))
    np.testing.assert_allclose(final.mem, truth.memory)
    np.testing.assert_allclose(final.time, truth.time)
    whole, _, _ = _finish_exactly(cg, h)
    np.testing.assert_allclose(whole.mem, brute_force_frontier(cg).memory)


@pytest.mark.parametrize("seed", range(10))
def test_configs_rank_after_those_that_dominate_them_and_the_ends_come_early(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 30))
    costs = rng.integers(1, 9, size=(K, 2)).astype(float)
    g = build_working_graph(CostGraph([costs], []))
    order = rank_configs(g, 0)
    assert sorted(order.tolist()) == list(range(K))
    place = np.empty(K, dtype=np.int64)
    place[order] = np.arange(K)
    m, t = costs[:, 0], costs[:, 1]
    dominated = np.zeros(K, dtype=bool)
    for c in range(K):
        better = (m < m[c]) & (t < t[c])  # strictly better in both
        dominated[c] = better.any()
        assert np.all(place[better] < place[c])
    # a config best for some weight (the least time, the least memory) comes before every
    # config that is never best
    for end in (t, m):
        if (end == end.min()).sum() == 1 and dominated.any():
            assert place[np.argmin(end)] < place[dominated].min()


def _pareto_layers(mem, tim):
    """Layer of every point by repeated non-dominated sorting (brute force); a point equal to
    one of lower index counts as dominated by it."""
    layer = np.full(mem.size, -1)
    depth = 0
    while (layer < 0).any():
        left = np.flatnonzero(layer < 0)
        for a in left:
            beaten = any(mem[b] <= mem[a] and tim[b] <= tim[a] and (mem[b] < mem[a] or tim[b] < tim[a] or b < a)
                         for b in left if b != a)
            if not beaten:
                layer[a] = depth
        depth += 1
    return layer


@pytest.mark.parametrize("seed", range(10))
def test_the_ranking_keeps_the_pareto_layers_from_both_ends(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 30))
    costs = rng.integers(1, 9, size=(K, 2)).astype(float)
    m, t = costs[:, 0], costs[:, 1]
    layers = _layer_order(m, t)
    layer = _pareto_layers(m, t)
    assert sorted(layers.tolist()) == list(range(K)) and np.all(np.diff(layer[layers]) >= 0)
    first = layers[layer[layers] == 0]
    if first.size > 1:  # the two ends of the first layer come first
        assert {int(first[0]), int(first[1])} == {int(np.lexsort((t, m))[0]), int(np.lexsort((m, t))[0])}
    # the ranking takes from the layers as fast as from the weights: the first j configs by
    # layer are among its first 2j
    order = rank_configs(build_working_graph(CostGraph([costs], [])), 0)
    for j in range(1, K + 1):
        assert set(layers[:j].tolist()) <= set(order[:2 * j].tolist())


def test_a_config_no_weight_favours_is_kept_by_its_layer():
    # (6, 6) is on the frontier but above the line between its ends: every weight prefers an end
    # or one of the dominated (2, 10.5) and (10.5, 2), so by weight alone it would come last;
    # its layer brings it before one of them
    costs = np.array([[1.0, 10.0], [10.0, 1.0], [2.0, 10.5], [10.5, 2.0], [6.0, 6.0]])
    order = rank_configs(build_working_graph(CostGraph([costs], [])), 0).tolist()
    assert order[:2] == [0, 1] and order.index(4) < order.index(3)


def test_rank_configs_counts_the_cheapest_edge_cell():
    # node 0's configs cost the same alone; its edge makes config 2 the cheapest in both
    nodes = [np.ones((3, 2)), np.zeros((2, 2))]
    edge = np.full((3, 2, 2), 5.0)
    edge[2, 1] = 0.0
    g = build_working_graph(CostGraph(nodes, [(0, 1, edge)]))
    assert rank_configs(g, 0)[0] == 2


def test_rank_configs_puts_forbidden_configs_last():
    costs = np.array([[2.0, 2.0], [np.inf, 1.0], [1.0, 3.0], [3.0, np.inf]])
    edge = np.ones((4, 2, 2))
    edge[2] = np.inf  # every cell of config 2 forbidden
    g = build_working_graph(CostGraph([costs, np.zeros((2, 2))], [(0, 1, edge)]))
    order = rank_configs(g, 0)
    assert order.tolist()[0] == 0 and set(order.tolist()[1:]) == {1, 2, 3}


def test_nodes_of_the_same_content_are_ranked_once():
    # nodes 0 and 2 (and their edges to 1 and 3) have the same costs; node 4 has node 0's own
    # costs but another edge: its ranking is its own (and differs)
    rng = np.random.default_rng(5)
    costs, other = rng.integers(1, 9, size=(12, 2)).astype(float), rng.integers(1, 9, size=(4, 2)).astype(float)
    edge, edge2 = rng.integers(0, 5, size=(12, 4, 1, 2)).astype(float), rng.integers(0, 5, size=(12, 4, 1, 2)).astype(float)
    cg = CostGraph([costs, other, costs, other, costs, other],
                   [(0, 1, edge), (2, 3, edge), (4, 5, edge2)])
    g = build_working_graph(cg)
    first = rank_configs(g, 0)
    first[:] = -1  # the caller's copy: the cached ranking is untouched
    assert len(g.rank_cache) == 1
    again = rank_configs(g, 2)
    assert len(g.rank_cache) == 1
    alone = build_working_graph(CostGraph([costs, other], [(0, 1, edge)]))
    np.testing.assert_array_equal(again, rank_configs(alone, 0))
    own = rank_configs(g, 4)
    assert len(g.rank_cache) == 2 and not np.array_equal(own, again)
    np.testing.assert_array_equal(own, rank_configs(build_working_graph(CostGraph([costs, other], [(0, 1, edge2)])), 0))


def test_a_costly_step_keeps_the_best_configs_that_fit_or_fixes_the_node():
    cg = _mixed_graph(0)
    g = build_working_graph(cg)
    work = elimination_work(g, 1)
    K = g.nodes[1].K
    assert not shrink_costly(g, 1, "min_memory", work * 0.6)  # a share of the configs fits
    assert 2 <= g.nodes[1].K < K and elimination_work(g, 1) <= work * 0.6
    assert g.stats["work_restricted"] == 1 and g.stats["heuristic"] == 1
    fixed = []
    assert shrink_costly(g, 2, "min_memory", elimination_work(g, 2) * MIN_KEPT_SHARE / 2,
                         before_fix=lambda: fixed.append(1))
    assert 2 not in g.nodes and fixed == [1]
    assert g.stats["work_capped"] == 2 and g.stats["heuristic"] == 2


def _restrict(cost, u, v, k):
    """Edge cost with node 0 restricted to its config k."""
    if isinstance(cost, LayoutEdge):
        cost = cost.dense()
    if u == 0:
        return cost[k:k + 1]
    if v == 0:
        return cost[:, k:k + 1]
    return cost


def test_marking_follows_the_chain_and_ldp_is_exact():
    """ResNet-like: a chain with skip edges over one node; the marked chain is the main path."""
    rng = np.random.default_rng(2)
    n = 9
    ks = [2, 3, 2, 3, 2, 3, 2, 3, 2]
    nodes = int_nodes(rng, ks)
    edges = [(i, i + 1, int_edge(rng, ks[i], ks[i + 1])) for i in range(n - 1)]
    edges += [(i, i + 2, int_layout(rng, ks[i], ks[i + 2], 2, 2)) for i in range(0, n - 2, 2)]
    cg = CostGraph(nodes, edges)
    g = build_working_graph(cg)
    chains = simplify(g, "ldp", True, 10**9, "min_memory", cg.topological_order)
    assert len(chains) == 1
    chain = chains[0]
    assert chain == [0, 2, 4, 6, 8]  # odd nodes were node-eliminated onto the skip edges
    # the remaining graph is exactly a simple path over the chain
    for a, b in zip(chain, chain[1:]):
        assert b in g.adj[a]
    assert all(len(g.adj[x]) <= 2 for x in chain) and set(g.nodes) == set(chain)
    ldp(g, chain)
    final, ch, ech = finish(g, cg.n_nodes, cg.n_edges)
    bf = brute_force_frontier(cg)
    np.testing.assert_allclose(final.mem, bf.memory)
    np.testing.assert_allclose(final.time, bf.time)


def test_chain_marker_starts_one_chain_per_component():
    cg = random_small_dag(8, edge_prob=0.2, seed=4)
    g = build_working_graph(cg)
    marker = ChainMarker(g, cg.topological_order)
    comps = cg.components()
    assert len(marker.chains) == len(comps)
    pos = {x: r for r, x in enumerate(cg.topological_order)}
    for chain, comp in zip(marker.chains, sorted(comps, key=lambda c: min(pos[x] for x in c))):
        assert chain[0] == min(comp, key=lambda x: pos[x])


@pytest.mark.parametrize("seed", range(25))
def test_simplify_keeps_chains_simple_paths(seed):
    cg = random_small_dag(8, max_k=3, edge_prob=0.5, seed=100 + seed)
    g = build_working_graph(cg)
    chains = simplify(g, "ldp", True, 10**9, "min_memory", cg.topological_order)
    on_chain = {x for c in chains for x in c}
    assert set(g.nodes) == on_chain
    for c in chains:
        for i, x in enumerate(c):
            expect = set(c[max(0, i - 1):i]) | set(c[i + 1:i + 2])
            assert set(g.adj[x]) == expect


@pytest.mark.parametrize("seed", range(4))
def test_a_node_gives_way_to_a_neighbour_that_makes_a_smaller_edge(seed):
    # path 0-1-2-3 with K = 20, 3, 20, 2: in index order node 1 would go first and make a
    # 20 x 20 edge; node 2, between 3 and 2 configs, makes a 3 x 2 one and must go first
    rng = np.random.default_rng(seed)
    ks = [20, 3, 20, 2]
    cg = CostGraph(int_nodes(rng, ks), [(u, u + 1, int_edge(rng, ks[u], ks[u + 1])) for u in range(3)])
    g = build_working_graph(cg)
    left = []
    simplify(g, "elimination", True, 10**9, "min_memory", cg.topological_order,
             on_step=lambda g: left.append(set(g.nodes)))
    assert left[0] - left[1] == {2}
    final, ch, ech = finish(g, cg.n_nodes, cg.n_edges)
    bf = brute_force_frontier(cg)
    np.testing.assert_allclose(final.mem, bf.memory, rtol=1e-12)
    np.testing.assert_allclose(final.time, bf.time, rtol=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_staged_products_and_batched_terms_stay_exact(seed, monkeypatch):
    """Force the staging of 3-way products and tiny term batches (concatenation tables)."""
    import tensoropt_py.elimination.table as table
    from tensoropt_py.engine import track

    monkeypatch.setattr(table, "_STAGE_FACTOR", 0.0)
    monkeypatch.setattr(table, "_MAX_TERMS_PER_BATCH", 3)
    cg = random_small_dag(n_nodes=7, max_k=3, edge_prob=0.5, max_options=2, seed=500 + seed)
    if cg.n_strategies() > 300_000:
        pytest.skip("too many strategies for the oracle")
    bf = brute_force_frontier(cg)
    for method in ("ldp", "elimination"):
        fr = track(cg, method=method, exact=True, threads=1)
        np.testing.assert_allclose(fr.memory, bf.memory, rtol=1e-12)
        np.testing.assert_allclose(fr.time, bf.time, rtol=1e-12)
        m, t = evaluate(cg, fr.choices, fr.edge_choices)
        np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
        np.testing.assert_allclose(t, fr.time, rtol=1e-12)


@pytest.mark.parametrize("as_sums", [False, True])
def test_a_staged_product_is_thinned_when_its_step_thins(as_sums):
    """Three 40-point cells per term: the product of the first two is staged, thinned like the
    union after it (a step of the depth), and the result still covers the exact one."""
    from tensoropt_py.elimination.table import Context, FTable

    rng = np.random.default_rng(3)
    eps = 0.01
    costs = [(np.sort(rng.uniform(1.0, 100.0, (2, 40)), axis=1).ravel(),  # two cells of 40 frontier points
              np.sort(rng.uniform(1.0, 100.0, (2, 40)), axis=1)[:, ::-1].ravel().copy()) for _ in range(3)]

    def run(epsilon):
        ctx = Context(epsilon=epsilon)
        parents = [ctx.register(FTable(np.arange(3, dtype=np.int64) * 40, m, t)) for m, t in costs]
        term_off = np.array([0, 2, 4])
        if as_sums:  # cell c, term u: slot 0 takes cell c, slot 1 cell u, slot 2 cell 1 - c
            row = np.array([[0, 1], [0, 0], [1, 0]])
            col = np.array([[0, 0], [0, 1], [0, 0]])
            out = ctx._combine_outer(parents, term_off, row, col, thin=True)
        else:
            cells = np.array([[0, 0, 1], [0, 1, 1], [1, 0, 0], [1, 1, 0]])
            out = ctx.combine(parents, term_off, cells)
        return ctx, out

    ctx, out = run(eps)
    exact_ctx, exact = run(0.0)
    assert ctx.stats["staged"] == 1 and exact_ctx.stats["staged"] == 1
    staged = out.parents[0]
    for c in range(staged.n_cells):
        m, _ = staged.cell(c)
        assert np.all(m[1:] > (1 + eps) * m[:-1])  # thinned
    assert exact.parents[0].n_points > staged.n_points
    assert out.depth == 2  # the staged product, then the union
    for c in range(exact.n_cells):
        m, t = out.cell(c)
        for em, et in zip(*exact.cell(c)):
            assert np.any((t <= et) & (m <= (1 + eps) ** 2 * em * (1 + 1e-12)))


def test_a_combine_result_larger_than_a_quarter_of_the_memo_is_reused(monkeypatch):
    """A repeated layer's largest step is the one most worth its memo entry: a result that
    fits the memo is kept, whatever share of it it takes (the oldest entries make room)."""
    import tensoropt_py.elimination.table as table
    from tensoropt_py.elimination.table import Context, FTable

    monkeypatch.setattr(table, "_MEMO_BYTES", 1 << 16)
    rng = np.random.default_rng(5)
    mem = np.sort(rng.uniform(1.0, 100.0, (8, 50)), axis=1).ravel()
    tim = np.sort(rng.uniform(1.0, 100.0, (8, 50)), axis=1)[:, ::-1].ravel().copy()
    ctx = Context()
    outs = []
    for _ in range(2):  # the same content twice, as two repeated layers give it
        big = ctx.register(FTable(np.arange(9, dtype=np.int64) * 50, mem.copy(), tim.copy()))
        term_off = np.arange(0, 8 * 40 + 1, 40)  # 320 terms: past the few a memo entry needs
        cells = np.stack([np.repeat(np.arange(8), 40), np.tile(np.arange(8), 40)], axis=1)
        outs.append(ctx.combine([big, big], term_off, cells))
    entry = sum(a.nbytes for a in (outs[0].offsets, outs[0].mem, outs[0].time, outs[0].prov))
    assert ctx._memo_cap // 4 < entry <= ctx._memo_cap
    assert ctx.stats["memo_hits"] == 1
    np.testing.assert_array_equal(outs[1].mem, outs[0].mem)


def test_edges_sharing_a_table_share_its_leaf_and_its_content_digest():
    """The leaf of a cost table given for several edges is built and hashed once: each edge's
    leaf holds the same arrays and the digest of their content; another table's leaf does not."""
    from tensoropt_py.elimination.table import Context, digest_arrays

    rng = np.random.default_rng(3)
    shared, other = rng.uniform(0.0, 5.0, (2, 3, 4, 2, 2))
    ctx = Context()
    leaves = [ctx.edge_leaf(e, shared) for e in range(3)] + [ctx.edge_leaf(3, other)]
    for leaf in leaves:
        assert leaf.digest() == digest_arrays(leaf.offsets, leaf.mem, leaf.time)
    assert all(leaf.mem is leaves[0].mem for leaf in leaves[1:3])
    assert leaves[3].digest() != leaves[0].digest()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("given_radices", [True, False])
def test_unique_rows_matches_numpy(seed, given_radices):
    from tensoropt_py.elimination.table import unique_rows

    rng = np.random.default_rng(seed)
    radices = [int(r) for r in rng.integers(1, 7, size=3)]
    rows = np.stack([rng.integers(0, r, size=200) for r in radices], axis=1).astype(np.int64)
    first, inv = unique_rows(rows, radices if given_radices else None)
    u2, f2, i2 = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(first, f2)
    np.testing.assert_array_equal(inv, i2.reshape(-1))
    np.testing.assert_array_equal(rows[first][inv], rows)


def test_unique_rows_past_an_int64_key():
    """Radices whose product passes 2**62 fall back to sorting rows: same answer."""
    from tensoropt_py.elimination.table import unique_rows

    rows = np.array([[5, 2**40], [0, 3], [5, 2**40], [0, 1]], dtype=np.int64)
    first, inv = unique_rows(rows, [2**30, 2**41])
    assert first.tolist() == [3, 1, 0]
    assert inv.tolist() == [2, 1, 2, 0]
