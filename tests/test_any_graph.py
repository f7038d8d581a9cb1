"""Any cost graph: cycles, forbidden (sentinel) costs, bad input (brute-force oracles)."""

import numpy as np
import pytest

from tensoropt_py.engine import CostGraph, LayoutEdge, brute_force_frontier, evaluate, track
from tensoropt_py.engine.cost_graph import FORBIDDEN_COST
from tensoropt_py.engine.random_graphs import random_cyclic_graph
from tensoropt_py.errors import CostGraphError, InfeasibleError

SENTINEL = 1e18


def _same(fr, bf):
    return np.array_equal(fr.memory, bf.memory) and np.array_equal(fr.time, bf.time)


def _check_achievable(cg, fr):
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)
    assert np.all(np.isfinite(fr.memory)) and np.all(np.isfinite(fr.time))


def test_triangle_is_accepted_and_ordered():
    n = np.array([[1.0, 2.0], [2.0, 1.0]])
    cg = CostGraph([n, n, n], [(0, 1, np.zeros((2, 2, 2))), (1, 2, np.zeros((2, 2, 2))), (2, 0, np.zeros((2, 2, 2)))])
    assert not cg.acyclic
    assert sorted(cg.topological_order) == [0, 1, 2]
    assert CostGraph([n, n], [(0, 1, np.zeros((2, 2, 2)))]).acyclic


@pytest.mark.parametrize("method", ["ldp", "elimination"])
@pytest.mark.parametrize("seed", range(40))
def test_cyclic_exact_equals_brute_force(method, seed):
    cg = random_cyclic_graph(seed=seed)
    assert cg.n_nodes < 3 or not cg.acyclic
    bf = brute_force_frontier(cg)
    fr = track(cg, method=method, exact=True)
    assert _same(fr, bf)
    _check_achievable(cg, fr)


@pytest.mark.parametrize("method", ["ldp", "elimination"])
@pytest.mark.parametrize("seed", range(40))
def test_forbidden_costs_never_returned(method, seed):
    cg = random_cyclic_graph(seed=1000 + seed, forbidden_prob=0.08)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        with pytest.raises(InfeasibleError, match="forbidden cost"):
            track(cg, method=method, exact=True)
        return
    fr = track(cg, method=method, exact=True)
    assert _same(fr, bf)
    _check_achievable(cg, fr)
    assert fr.memory.max() < FORBIDDEN_COST and fr.time.max() < FORBIDDEN_COST


@pytest.mark.parametrize("seed", range(15))
def test_heuristic_results_are_achievable_on_cyclic_graphs(seed):
    cg = random_cyclic_graph(n_nodes=7, max_k=3, edge_prob=0.7, seed=2000 + seed, forbidden_prob=0.05)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        with pytest.raises(InfeasibleError, match="forbidden cost"):
            track(cg, exact=False, max_merged_configs=2)
        return
    fr = track(cg, exact=False, max_merged_configs=2)
    _check_achievable(cg, fr)
    # every returned point is a real strategy: it is weakly dominated by the exact frontier
    for m, t in zip(fr.memory, fr.time):
        assert np.any((bf.memory <= m) & (bf.time <= t))


@pytest.mark.parametrize(
    "forbidden_prob, heuristic, seed",
    [(0.15, "min_memory", 15), (0.15, "weighted", 19), (0.3, "weighted", 235), (0.3, "auto", 257)],
)
def test_heuristics_that_leave_no_feasible_strategy_fall_back_to_the_exact_optima(forbidden_prob, heuristic, seed):
    # on these graphs the heuristic eliminations fix configs that no strategy without forbidden
    # costs agrees with; with anchors=False the run would end empty though the graph is feasible
    cg = random_cyclic_graph(n_nodes=6, max_k=3, edge_prob=0.7, seed=seed, forbidden_prob=forbidden_prob)
    bf = brute_force_frontier(cg, max_strategies=10**7)
    assert len(bf) > 0
    fr = track(cg, exact=False, max_merged_configs=2, anchors=False, heuristic=heuristic)
    assert fr.n_heuristic > 0 and fr.stats["anchors_after_empty"] is True
    _check_achievable(cg, fr)
    assert fr.memory.max() < FORBIDDEN_COST and fr.time.max() < FORBIDDEN_COST
    # the exact optima: both ends of the true frontier
    assert fr.time.min() == pytest.approx(bf.time.min(), rel=1e-12)
    assert fr.memory.min() == pytest.approx(bf.memory.min(), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_infeasible_after_heuristics_is_said_to_be_infeasible(seed):
    # every strategy is forbidden: the exact optima prove it, so the error does not blame the heuristics
    cg = random_cyclic_graph(n_nodes=6, max_k=3, edge_prob=0.7, seed=seed, forbidden_prob=0.3)
    assert len(brute_force_frontier(cg, max_strategies=10**7)) == 0
    with pytest.raises(InfeasibleError, match="forbidden cost") as info:
        track(cg, exact=False, max_merged_configs=2, anchors=False)
    assert "heuristic" not in str(info.value)


@pytest.mark.parametrize("heuristic", ["min_memory", "weighted"])
def test_heuristic_never_fixes_a_config_forbidden_towards_a_neighbour(heuristic):
    # a 4-clique needs one heuristic elimination (node 0, of the largest degree, the least id);
    # node 0's config 0 uses the least memory but is forbidden towards every config of node 1:
    # fixing it would leave no strategy at all
    node0 = np.array([[1.0, 1.0], [2.0, 1.0]])
    other = np.array([[1.0, 1.0], [1.0, 2.0]])
    free = np.zeros((2, 2, 1, 2))
    blocked = free.copy()
    blocked[0, :, 0, :] = SENTINEL
    edges = [(0, 1, blocked), (0, 2, free), (0, 3, free), (1, 2, free), (1, 3, free), (2, 3, free)]
    cg = CostGraph([node0, other, other, other], edges)
    fr = track(cg, method="elimination", max_merged_configs=1, heuristic=heuristic, anchors=False)
    assert fr.n_heuristic == 1 and fr.choices[:, 0].tolist() == [1]
    assert fr.memory.tolist() == [5.0] and fr.time.tolist() == [4.0]  # the one strategy: all brute force has
    bf = brute_force_frontier(cg)
    assert _same(fr, bf)


def test_sentinel_on_fast_config_is_not_returned():
    # config 1 is much faster but forbidden by a 1e18 memory sentinel
    cg = CostGraph([np.array([[1.0, 5.0], [SENTINEL, 0.0]]), np.array([[1.0, 1.0]])], [(0, 1, np.zeros((2, 1, 2)))])
    fr = track(cg, exact=True)
    assert fr.memory.tolist() == [2.0] and fr.time.tolist() == [6.0]
    assert fr.choices.tolist() == [[0, 0]]
    assert cg.n_forbidden == 1
    m, _ = evaluate(cg, [[1, 0]])
    assert m[0] == np.inf


def test_forbidden_pair_small_costs_keep_precision():
    # a sum with a 1e18 sentinel would swallow the 0.25 difference; forbidden pairs must drop out
    node = np.array([[0.0, 1.0], [0.0, 1.25]])
    edge = np.zeros((2, 2, 2))
    edge[0, 0] = [SENTINEL, SENTINEL]
    edge[1, 1] = [0.0, SENTINEL]
    cg = CostGraph([node, node], [(0, 1, edge), (1, 0, np.zeros((2, 2, 2)))])
    fr = track(cg, exact=True)
    assert fr.time.tolist() == [2.25]
    assert sorted(fr.choices[0].tolist()) == [0, 1]


def test_all_forbidden_is_infeasible_or_named():
    n = np.array([[1.0, 1.0], [2.0, 0.5]])
    edge = np.full((2, 2, 2), SENTINEL)
    with pytest.raises(InfeasibleError, match="forbidden"):
        track(CostGraph([n, n], [(0, 1, edge)]))
    with pytest.raises(CostGraphError, match="node 1: every one of its 2 configs is forbidden"):
        CostGraph([n, np.full((2, 2), SENTINEL)], [])


def test_layout_edge_sentinels_become_inf():
    tab = np.zeros((2, 2, 2))
    tab[0, 1] = [SENTINEL, 0.0]
    cg = CostGraph([np.ones((2, 2)), np.ones((2, 2))], [(0, 1, LayoutEdge([0, 1], [0, 1], tab))])
    assert np.isinf(cg.edges[0][2].table[0, 1]).all()
    fr = track(cg, exact=True)
    assert [0, 1] not in fr.choices.tolist()


@pytest.mark.parametrize(
    "nodes, edges, match",
    [
        ([np.ones((2, 2)), np.array([[1.0, np.nan]]), np.ones((2, 2))], None, "node 1 has NaN at index"),
        ([np.ones((2, 2)), np.array([[1.0, -3.0]]), np.ones((2, 2))], None, "node 1 has negative cost -3.0"),
        ([np.ones((2, 2)), np.ones((1, 2)), np.ones((2, 2))], "shape", r"edge 2 \(2->0\): cost must have shape \(2, 2, 2\)"),
        ([np.ones((2, 2)), np.ones((1, 2)), np.ones((2, 2))], "nan", r"edge 1 \(1->2\) has NaN"),
    ],
)
def test_bad_input_on_cyclic_graph_is_named(nodes, edges, match):
    ring = [(0, 1, np.zeros((2, len(nodes[1]), 2))), (1, 2, np.zeros((len(nodes[1]), 2, 2))), (2, 0, np.zeros((2, 2, 2)))]
    if edges == "shape":
        ring[2] = (2, 0, np.zeros((2, 3, 2)))
    elif edges == "nan":
        bad = np.zeros((len(nodes[1]), 2, 2))
        bad[0, 1, 0] = np.nan
        ring[1] = (1, 2, bad)
    with pytest.raises(CostGraphError, match=match):
        CostGraph(nodes, ring)
